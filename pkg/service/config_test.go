package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/service"
)

const db = "postgres://localhost/x"

func TestAuthConfig(t *testing.T) {
	secret := strings.Repeat("s", 32)
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		accepts []auth.Key // keys whose tokens verify
		refuses []auth.Key
	}{
		{name: "nothing set", env: map[string]string{}, wantErr: "AUTH_JWT_KEYS: required"},
		{name: "dev key", env: map[string]string{"AUTH_DEV_KEY": "true"}, accepts: []auth.Key{auth.DevKey}},
		{name: "configured keys only", env: map[string]string{"AUTH_JWT_KEYS": "k1=" + secret + ",k2=" + strings.Repeat("t", 40)},
			accepts: []auth.Key{{ID: "k1", Secret: []byte(secret)}, {ID: "k2", Secret: []byte(strings.Repeat("t", 40))}},
			refuses: []auth.Key{auth.DevKey}},
		{name: "dev key explicitly off", env: map[string]string{"AUTH_JWT_KEYS": "k1=" + secret, "AUTH_DEV_KEY": "false"},
			refuses: []auth.Key{auth.DevKey}},
		{name: "short secret", env: map[string]string{"AUTH_JWT_KEYS": "k1=short"}, wantErr: "shorter than 32"},
		{name: "no equals", env: map[string]string{"AUTH_JWT_KEYS": "k1"}, wantErr: "kid=secret"},
		{name: "bad bool", env: map[string]string{"AUTH_DEV_KEY": "yes please"}, wantErr: "AUTH_DEV_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["DATABASE_URL"] = db
			cfg, err := service.LoadConfig(service.NewEnvFrom(tt.env), "svc", 1)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "short") && strings.Contains(err.Error(), "k1=short") {
					t.Fatal("the error echoes a secret")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range tt.accepts {
				tok, _ := auth.Token(k, auth.NewClaims("a", auth.RoleOperator, "", time.Minute))
				if _, err := cfg.Auth.Verify(tok); err != nil {
					t.Errorf("key %s refused: %v", k.ID, err)
				}
			}
			for _, k := range tt.refuses {
				tok, _ := auth.Token(k, auth.NewClaims("a", auth.RoleOperator, "", time.Minute))
				if _, err := cfg.Auth.Verify(tok); err == nil {
					t.Errorf("key %s accepted", k.ID)
				}
			}
			// The service signs its own calls with the first key.
			tok, err := cfg.Auth.Sign(auth.NewClaims("svc", auth.RoleService, "", time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cfg.Auth.Verify(tok); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestServiceURLs(t *testing.T) {
	cfg, err := service.LoadConfig(service.NewEnvFrom(map[string]string{"DATABASE_URL": db, "AUTH_DEV_KEY": "true"}), "svc", 1)
	if err != nil || cfg.ServiceURLs["billing"] != "http://127.0.0.1:8083" || len(cfg.ServiceURLs) != 5 {
		t.Fatalf("default %v, %v", cfg.ServiceURLs, err)
	}
	cfg, err = service.LoadConfig(service.NewEnvFrom(map[string]string{"DATABASE_URL": db, "AUTH_DEV_KEY": "true",
		"SERVICE_URLS": " usage = http://usage:8082/ , billing=https://billing.internal"}), "svc", 1)
	if err != nil || len(cfg.ServiceURLs) != 2 || cfg.ServiceURLs["usage"] != "http://usage:8082" || cfg.ServiceURLs["billing"] != "https://billing.internal" {
		t.Fatalf("parsed %v, %v", cfg.ServiceURLs, err)
	}
	for _, bad := range []string{"usage", "usage=ftp://x", "=http://x", "usage=http://"} {
		if _, err := service.LoadConfig(service.NewEnvFrom(map[string]string{"DATABASE_URL": db, "AUTH_DEV_KEY": "true",
			"SERVICE_URLS": bad}), "svc", 1); err == nil || !strings.Contains(err.Error(), "SERVICE_URLS") {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}
