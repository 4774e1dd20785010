package auth_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/usagebilling/billing/pkg/auth"
)

var key = auth.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}

func keys(t *testing.T) auth.Keys {
	t.Helper()
	k, err := auth.NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t *testing.T, k auth.Key, c auth.Claims) string {
	t.Helper()
	s, err := auth.Token(k, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerify(t *testing.T) {
	k := keys(t)
	good := auth.NewClaims("alice", auth.RoleOperator, "", time.Minute)
	expired := auth.NewClaims("alice", auth.RoleOperator, "", time.Minute)
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour))
	noExp := auth.NewClaims("alice", auth.RoleOperator, "", time.Minute)
	noExp.ExpiresAt = nil
	raw := func(method jwt.SigningMethod, kid string, c jwt.Claims, secret any) string {
		tok := jwt.NewWithClaims(method, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"valid", sign(t, key, good), true},
		{"other secret", sign(t, auth.Key{ID: "k1", Secret: []byte(strings.Repeat("x", 32))}, good), false},
		{"unknown kid", sign(t, auth.Key{ID: "k2", Secret: key.Secret}, good), false},
		{"dev key not configured", sign(t, auth.DevKey, good), false},
		{"expired", sign(t, key, expired), false},
		{"no expiry", raw(jwt.SigningMethodHS256, "k1", noExp, key.Secret), false},
		{"HS512", raw(jwt.SigningMethodHS512, "k1", good, key.Secret), false},
		{"alg none", raw(jwt.SigningMethodNone, "k1", good, jwt.UnsafeAllowNoneSignatureType), false},
		{"no kid", raw(jwt.SigningMethodHS256, "", good, key.Secret), false},
		{"unknown role", raw(jwt.SigningMethodHS256, "k1", auth.NewClaims("a", "admin", "", time.Minute), key.Secret), false},
		{"tenant token without tenant", raw(jwt.SigningMethodHS256, "k1", auth.NewClaims("a", auth.RoleTenant, "", time.Minute), key.Secret), false},
		{"no subject", raw(jwt.SigningMethodHS256, "k1", auth.NewClaims("", auth.RoleOperator, "", time.Minute), key.Secret), false},
		{"garbage", "not.a.token", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := k.Verify(tt.token)
			if (err == nil) != tt.ok {
				t.Fatalf("Verify: err = %v, want ok %v", err, tt.ok)
			}
			if tt.ok && (c.Actor() != "alice" || c.Role != auth.RoleOperator) {
				t.Fatalf("claims = %+v", c)
			}
		})
	}
}

func TestParseKeys(t *testing.T) {
	ks, err := auth.ParseKeys(" a = 0123456789abcdef0123456789abcdef , b=abcdefabcdefabcdefabcdefabcdefabcdef")
	if err != nil || len(ks) != 2 || ks[0].ID != "a" || string(ks[1].Secret) != "abcdefabcdefabcdefabcdefabcdefabcdef" {
		t.Fatalf("ParseKeys = %+v, %v", ks, err)
	}
	for _, bad := range []string{"", "nokey", ","} {
		if _, err := auth.ParseKeys(bad); err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
		}
	}
	if _, err := auth.NewKeys(auth.Key{ID: "short", Secret: []byte("short")}); err == nil {
		t.Error("a short secret was accepted")
	}
	if _, err := auth.NewKeys(key, key); err == nil {
		t.Error("a repeated key id was accepted")
	}
}

func TestMiddleware(t *testing.T) {
	k := keys(t)
	var reached bool
	h := auth.Middleware(k, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached = true
		c, ok := auth.FromContext(r.Context())
		if rule, _ := auth.RuleFor(r.URL.Path); !ok && rule != auth.Open && rule != auth.Console {
			t.Error("no claims in the handler's context")
		}
		_ = json.NewEncoder(w).Encode(c)
	}))
	op := sign(t, key, auth.NewClaims("alice", auth.RoleOperator, "", time.Minute))
	acme := sign(t, key, auth.NewClaims("bob", auth.RoleTenant, "acme", time.Minute))
	svc := sign(t, key, auth.NewClaims("query", auth.RoleService, "", time.Minute))
	tests := []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/metrics", "", 200},
		{"/v1/tenants/acme/summary", "", 401},
		{"/v1/tenants/acme/summary", "garbage", 401},
		{"/v1/tenants/acme/summary", acme, 200},
		{"/v1/tenants/acme/summary", op, 200},
		{"/v1/tenants/acme/summary", svc, 403},
		{"/v1/tenants/other/summary", acme, 403},
		{"/v1/tenants/acmeX/summary", acme, 403},
		{"/v1/tenants/acme", acme, 200},
		{"/v1/tenants/%61cme/summary", acme, 403}, // routed as the raw segment
		{"/v1/operator/recovery", acme, 403},
		{"/v1/operator/recovery", svc, 403},
		{"/v1/operator/recovery", op, 200},
		{"/internal/v1/recovery", acme, 403},
		{"/internal/v1/recovery", svc, 200},
		{"/internal/v1/recovery", op, 200},
		{"/v2/anything", acme, 403},
		{"/v2/anything", "", 401},
		{"/console", "", 200}, // the console checks its own session cookie
		{"/console/quarantine", acme, 200},
		{"/consoles", "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			reached = false
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tt.want, rec.Body)
			}
			if reached != (tt.want == 200) {
				t.Fatalf("handler reached = %v", reached)
			}
			if tt.want != 200 {
				var p struct{ Code string }
				_ = json.Unmarshal(rec.Body.Bytes(), &p)
				want := map[int]string{401: "unauthorized", 403: "forbidden"}[tt.want]
				if p.Code != want || rec.Header().Get("Content-Type") != "application/problem+json" {
					t.Fatalf("body %s, want problem %s", rec.Body, want)
				}
			}
		})
	}
}
