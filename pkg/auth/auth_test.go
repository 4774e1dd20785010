package auth_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
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
			if tt.ok && (c.Actor() != "alice" || !c.Has(auth.RoleOperator)) {
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

func TestMiddlewareAndGuard(t *testing.T) {
	k := keys(t)
	var reached bool
	ok := func(w http.ResponseWriter, r *http.Request) {
		reached = true
		c, _ := auth.FromContext(r.Context())
		_ = json.NewEncoder(w).Encode(c)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(k, nil))
	r.Get("/healthz", ok)
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/summary", auth.Allow(ok, auth.RoleViewer))
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/usage", auth.Allow(ok, auth.RoleIngest))
	r.Method(http.MethodGet, "/v1/operator/recovery", auth.Allow(ok, auth.RoleOperator))
	r.Method(http.MethodGet, "/internal/v1/recovery", auth.Allow(ok, auth.RoleService))
	r.Method(http.MethodGet, "/console/sign-in", auth.Public(ok))
	r.Method(http.MethodGet, "/console/", auth.Allow(ok, auth.RoleOperator)) // no session: 401
	if err := auth.Check(r); err != nil {
		t.Fatal(err)
	}
	op := sign(t, key, auth.NewClaims("alice", auth.RoleOperator, "", time.Minute))
	acme := sign(t, key, auth.NewClaims("bob", auth.RoleTenant, "acme", time.Minute))
	viewer := sign(t, key, auth.NewClaimsRoles("carol", "acme", time.Minute, auth.RoleViewer))
	svc := sign(t, key, auth.NewClaims("query", auth.RoleService, "", time.Minute))
	tests := []struct {
		method, path, token string
		want                int
		code                string
	}{
		{"GET", "/healthz", "", 200, ""},
		{"GET", "/healthz", "garbage", 200, ""},
		{"GET", "/v1/tenants/acme/summary", "", 401, "unauthorized"},
		{"GET", "/v1/tenants/acme/summary", "garbage", 401, "invalid_token"},
		{"GET", "/v1/tenants/acme/summary", acme, 200, ""},
		{"GET", "/v1/tenants/acme/summary", viewer, 200, ""},
		{"POST", "/v1/tenants/acme/usage", viewer, 403, "forbidden"},
		{"POST", "/v1/tenants/acme/usage", acme, 200, ""},
		{"GET", "/v1/tenants/acme/summary", op, 403, "forbidden"},
		{"GET", "/v1/tenants/acme/summary", svc, 403, "forbidden"},
		{"GET", "/v1/tenants/other/summary", acme, 403, "forbidden"},
		{"GET", "/v1/tenants/acmeX/summary", acme, 403, "forbidden"},
		{"GET", "/v1/tenants/%61cme/summary", acme, 403, "forbidden"}, // routed as the raw segment
		{"GET", "/v1/operator/recovery", acme, 403, "forbidden"},
		{"GET", "/v1/operator/recovery", svc, 403, "forbidden"},
		{"GET", "/v1/operator/recovery", op, 200, ""},
		{"GET", "/internal/v1/recovery", acme, 403, "forbidden"},
		{"GET", "/internal/v1/recovery", op, 403, "forbidden"},
		{"GET", "/internal/v1/recovery", svc, 200, ""},
		{"GET", "/v2/anything", "", 401, "unauthorized"},
		{"GET", "/console/sign-in", "garbage", 200, ""},
		{"GET", "/console/", op, 401, "unauthorized"}, // the console's session, not a bearer
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path, func(t *testing.T) {
			reached = false
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tt.want, rec.Body)
			}
			if reached != (tt.want == 200) {
				t.Fatalf("handler reached = %v", reached)
			}
			if tt.want != 200 {
				var p struct{ Code string }
				_ = json.Unmarshal(rec.Body.Bytes(), &p)
				if p.Code != tt.code || rec.Header().Get("Content-Type") != "application/problem+json" {
					t.Fatalf("body %s, want problem %s", rec.Body, tt.code)
				}
			}
		})
	}
}

// Check refuses a router with a route that declares no roles, and a
// tenant-scoped role on a route without a tenant.
func TestCheck(t *testing.T) {
	h := func(http.ResponseWriter, *http.Request) {}
	bare := chi.NewRouter()
	bare.Method(http.MethodGet, "/v1/tenants/{tenantId}/prices", auth.Allow(h, auth.RoleViewer))
	bare.Get("/v1/tenants/{tenantId}/secrets", h)
	if err := auth.Check(bare); err == nil || !strings.Contains(err.Error(), "GET /v1/tenants/{tenantId}/secrets declares no roles") {
		t.Fatalf("Check = %v", err)
	}
	untenanted := chi.NewRouter()
	untenanted.Method(http.MethodGet, "/v1/everything", auth.Allow(h, auth.RoleViewer))
	if err := auth.Check(untenanted); err == nil {
		t.Fatal("a tenant-scoped role on a route without {tenantId} was accepted")
	}
}
