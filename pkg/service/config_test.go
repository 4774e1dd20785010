package service_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/service"
)

const db = "postgres://localhost/x"

func TestAuthConfig(t *testing.T) {
	dir := t.TempDir()
	k1, _ := auth.GenerateKey("k1")
	jwks := filepath.Join(dir, "jwks.json")
	svcKey, _ := auth.GenerateKey("svc/1")
	if err := auth.WriteJWKS(jwks, k1, svcKey); err != nil {
		t.Fatal(err)
	}
	pemKey, _ := auth.MarshalPrivateKey(svcKey.Private)
	keyFile := filepath.Join(dir, "svc.pem")
	if err := os.WriteFile(keyFile, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "private.json")
	_ = os.WriteFile(private, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","d":"secret-never-echoed"}]}`), 0o644)
	issuer := "https://issuer.example"
	doc, err := os.ReadFile(jwks)
	if err != nil {
		t.Fatal(err)
	}
	keysSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(doc) }))
	t.Cleanup(keysSrv.Close)
	keysURL := keysSrv.URL + "/jwks.json" // http://127.0.0.1:<port>
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		accepts []auth.Key // keys whose tokens verify
		refuses []auth.Key
		calls   bool // the service signs calls others (and itself, as an allowed caller) accept
	}{
		{name: "nothing set", env: map[string]string{}, wantErr: "AUTH_ISSUER: required"},
		{name: "no JWKS", env: map[string]string{"AUTH_ISSUER": issuer}, wantErr: "AUTH_JWKS: required"},
		{name: "dev key, loopback by default", env: map[string]string{"AUTH_DEV_KEY": "true"}, accepts: []auth.Key{auth.DevKey}},
		{name: "dev key on every interface", env: map[string]string{"AUTH_DEV_KEY": "true", "HTTP_ADDR": ":8081"}, wantErr: "loopback"},
		{name: "dev key on a public address", env: map[string]string{"AUTH_DEV_KEY": "true", "HTTP_ADDR": "0.0.0.0:8081"}, wantErr: "loopback"},
		{name: "JWKS and issuer", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": jwks},
			accepts: []auth.Key{k1}, refuses: []auth.Key{auth.DevKey}},
		{name: "dev key explicitly off", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": jwks, "AUTH_DEV_KEY": "false"},
			refuses: []auth.Key{auth.DevKey}},
		{name: "service key", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": jwks, "AUTH_SERVICE_KEY": keyFile,
			"AUTH_SERVICE_KEY_ID": "svc/1", "AUTH_SERVICE_CALLERS": "svc"}, calls: true},
		{name: "service key of another name", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": jwks, "AUTH_SERVICE_KEY": keyFile,
			"AUTH_SERVICE_KEY_ID": "query/1"}, wantErr: "does not start with"},
		{name: "missing JWKS file", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": filepath.Join(dir, "none.json")}, wantErr: "AUTH_JWKS"},
		{name: "JWKS with a private key", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": private}, wantErr: "private key"},
		{name: "bad bool", env: map[string]string{"AUTH_DEV_KEY": "yes please"}, wantErr: "AUTH_DEV_KEY"},
		// Keys over plain http from another host could be swapped on the
		// way: refused before any fetch (the host does not exist).
		{name: "JWKS over http", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": "http://keys.invalid/jwks.json"},
			wantErr: "AUTH_JWKS: an http:// JWKS URL is accepted only on a loopback host"},
		{name: "JWKS over HTTP, upper case", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": "HTTP://10.0.0.7/jwks.json"},
			wantErr: "only on a loopback host"},
		{name: "JWKS over http on loopback", env: map[string]string{"AUTH_ISSUER": issuer, "AUTH_JWKS": keysURL},
			accepts: []auth.Key{k1}},
		// The profiles have no authentication.
		{name: "pprof on every interface", env: map[string]string{"AUTH_DEV_KEY": "true", "PPROF_ADDR": ":6061"}, wantErr: "PPROF_ADDR"},
		{name: "pprof on a public address", env: map[string]string{"AUTH_DEV_KEY": "true", "PPROF_ADDR": "10.0.0.7:6061"}, wantErr: "PPROF_ADDR"},
		{name: "pprof on loopback", env: map[string]string{"AUTH_DEV_KEY": "true", "PPROF_ADDR": "127.0.0.1:6061"}, accepts: []auth.Key{auth.DevKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["DATABASE_URL"] = db
			cfg, err := service.LoadConfig(service.NewEnvFrom(tt.env), "svc", 1)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secret-never-echoed") {
					t.Fatal("the error echoes a secret")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sign := func(k auth.Key) string {
				c := auth.NewClaims("a", auth.RoleOperator, "", time.Minute)
				c.Issuer, c.Audience = issuer, jwt.ClaimStrings{"svc"}
				if k.ID == auth.DevKey.ID {
					c.Issuer = auth.DevIssuer
				}
				tok, err := auth.Token(k, c)
				if err != nil {
					t.Fatal(err)
				}
				return tok
			}
			for _, k := range tt.accepts {
				if _, err := cfg.Auth.Verify(sign(k)); err != nil {
					t.Errorf("key %s refused: %v", k.ID, err)
				}
			}
			for _, k := range tt.refuses {
				if _, err := cfg.Auth.Verify(sign(k)); err == nil {
					t.Errorf("key %s accepted", k.ID)
				}
			}
			if tt.calls {
				tok, err := cfg.Auth.ServiceToken("svc", "svc")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cfg.Auth.Verify(tok); err != nil {
					t.Fatal(err)
				}
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
