package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/auth"
)

const issuer = "https://issuer.example"

var key = mustKey("k1")

func mustKey(id string) auth.Key {
	k, err := auth.GenerateKey(id)
	if err != nil {
		panic(err)
	}
	return k
}

// keys are billing's keys: the issuer's key k1 and query's service key in
// a JWKS file, query allowed to call.
func keys(t *testing.T, jwks ...auth.Key) auth.Keys {
	t.Helper()
	if len(jwks) == 0 {
		jwks = []auth.Key{key, queryKey}
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := auth.WriteJWKS(path, jwks...); err != nil {
		t.Fatal(err)
	}
	k, err := auth.New(auth.Config{Service: "billing", Issuer: issuer, JWKS: path, Callers: []string{"query"}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	queryKey = mustKey("query/1")
	meterKey = mustKey("meter/1")
)

// claims are a user's, for billing, from the issuer.
func claims(sub, role, tenant string, ttl time.Duration) auth.Claims {
	c := auth.NewClaims(sub, role, tenant, ttl)
	c.Issuer, c.Audience = issuer, jwt.ClaimStrings{"billing"}
	return c
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
	good := claims("alice", auth.RoleOperator, "", time.Hour)
	with := func(f func(*auth.Claims)) auth.Claims {
		c := claims("alice", auth.RoleOperator, "", time.Hour)
		f(&c)
		return c
	}
	svc := func(sub, iss string, aud string, ttl time.Duration) auth.Claims {
		c := auth.NewClaims(sub, auth.RoleService, "", ttl)
		c.Issuer, c.Audience = iss, jwt.ClaimStrings{aud}
		return c
	}
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
	queryToken, err := func() (string, error) {
		qk, err := auth.New(auth.Config{Service: "query", Issuer: issuer, JWKS: writeJWKS(t, key), ServiceKey: &queryKey})
		if err != nil {
			return "", err
		}
		return qk.ServiceToken("query", "billing")
	}()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		token  string
		ok     bool
		reason string
	}{
		{"valid", sign(t, key, good), true, ""},
		{"a tenant token", sign(t, key, claims("bob", auth.RoleTenant, "acme", time.Hour)), true, ""},
		{"query's service token, made by ServiceToken", queryToken, true, ""},
		{"query's service token", sign(t, queryKey, svc("query", "query", "billing", time.Minute)), true, ""},
		{"other key, same kid", sign(t, auth.Key{ID: "k1", Private: mustKey("x").Private}, good), false, "bad signature"},
		{"unknown kid", sign(t, mustKey("k2"), good), false, "unverifiable"},
		{"dev key not configured", sign(t, auth.DevKey, good), false, "unverifiable"},
		{"wrong iss", sign(t, key, with(func(c *auth.Claims) { c.Issuer = "https://evil.example" })), false, "issuer"},
		{"no iss", sign(t, key, with(func(c *auth.Claims) { c.Issuer = "" })), false, "issuer"},
		{"wrong aud", sign(t, key, with(func(c *auth.Claims) { c.Audience = jwt.ClaimStrings{"invoice"} })), false, "aud"},
		{"no aud", sign(t, key, with(func(c *auth.Claims) { c.Audience = nil })), false, "aud"},
		{"expired", sign(t, key, with(func(c *auth.Claims) { c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour)) })), false, "expired"},
		{"lifetime too long", sign(t, key, claims("alice", auth.RoleOperator, "", 2*time.Hour)), false, "lifetime"},
		{"no iat", sign(t, key, with(func(c *auth.Claims) { c.IssuedAt = nil })), false, "lifetime"},
		{"no expiry", raw(jwt.SigningMethodEdDSA, "k1", with(func(c *auth.Claims) { c.ExpiresAt = nil }), key.Private), false, "required claim"},
		{"HS256", raw(jwt.SigningMethodHS256, "k1", good, []byte("0123456789abcdef0123456789abcdef")), false, "algorithm not accepted"},
		{"HS256 keyed with the public key", raw(jwt.SigningMethodHS256, "k1", good, []byte(key.Public())), false, "algorithm not accepted"},
		{"alg none", raw(jwt.SigningMethodNone, "k1", good, jwt.UnsafeAllowNoneSignatureType), false, "algorithm not accepted"},
		{"no kid", raw(jwt.SigningMethodEdDSA, "", good, key.Private), false, "unverifiable"},
		{"unknown role", raw(jwt.SigningMethodEdDSA, "k1", with(func(c *auth.Claims) { c.Roles = []string{"admin"} }), key.Private), false, "claims"},
		{"tenant role without tenant", raw(jwt.SigningMethodEdDSA, "k1", claims("a", auth.RoleViewer, "", time.Hour), key.Private), false, "claims"},
		{"operator with a tenant", raw(jwt.SigningMethodEdDSA, "k1", claims("a", auth.RoleOperator, "acme", time.Hour), key.Private), false, "claims"},
		{"no subject", raw(jwt.SigningMethodEdDSA, "k1", claims("", auth.RoleOperator, "", time.Hour), key.Private), false, "claims"},
		{"service token from the users' issuer", sign(t, key, svc("query", issuer, "billing", time.Minute)), false, "issuer"},
		{"service token signed by another service's key", sign(t, meterKey, svc("query", "query", "billing", time.Minute)), false, "unverifiable"},
		{"service token of a service not allowed", sign(t, meterKey, svc("meter", "meter", "billing", time.Minute)), false, "unverifiable"},
		{"service token for another service", sign(t, queryKey, svc("query", "query", "invoice", time.Minute)), false, "aud"},
		{"service token living too long", sign(t, queryKey, svc("query", "query", "billing", 10*time.Minute)), false, "lifetime"},
		{"user token signed with a service key", sign(t, queryKey, good), false, "issuer"},
		{"garbage", "not.a.token", false, "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := k.Verify(tt.token)
			if (err == nil) != tt.ok {
				t.Fatalf("Verify: err = %v, want ok %v", err, tt.ok)
			}
			if !tt.ok && !strings.Contains(auth.Reason(err), tt.reason) {
				t.Fatalf("reason %q (%v), want %q", auth.Reason(err), err, tt.reason)
			}
			if tt.ok && c.Actor() == "" {
				t.Fatalf("claims = %+v", c)
			}
		})
	}
}

// A service accepts service tokens only from the services allowed to call
// it, each signing with a key of its own name.
func TestServiceCallers(t *testing.T) {
	k := keys(t, key, queryKey, meterKey)
	svc := func(sub string) auth.Claims {
		c := auth.NewClaims(sub, auth.RoleService, "", time.Minute)
		c.Issuer, c.Audience = sub, jwt.ClaimStrings{"billing"}
		return c
	}
	if _, err := k.Verify(sign(t, queryKey, svc("query"))); err != nil {
		t.Fatalf("query refused: %v", err)
	}
	_, err := k.Verify(sign(t, meterKey, svc("meter")))
	if err == nil || !strings.Contains(auth.Reason(err), "does not accept calls from that service") {
		t.Fatalf("meter, not an allowed caller: %v", err)
	}
	if _, err := k.Verify(sign(t, meterKey, svc("query"))); err == nil {
		t.Fatal("meter's key spoke for query")
	}
}

func writeJWKS(t *testing.T, ks ...auth.Key) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := auth.WriteJWKS(path, ks...); err != nil {
		t.Fatal(err)
	}
	return path
}

// Keys rotate under traffic without a restart: while clients call without
// pause, the new key is published, the issuer switches to it, the old key
// is removed. Every request with a key in the document is admitted, none
// fails in between; after the removal the old key's tokens are refused.
func TestKeyRotationUnderTraffic(t *testing.T) {
	oldKey, newKey := mustKey("2026-11"), mustKey("2026-12")
	path := writeJWKS(t, oldKey)
	k, err := auth.New(auth.Config{Service: "billing", Issuer: issuer, JWKS: path, Refresh: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(k, nil))
	r.Method(http.MethodGet, "/v1/operator/recovery", auth.Allow(func(w http.ResponseWriter, _ *http.Request) {}, auth.RoleOperator))
	srv := httptest.NewServer(r)
	defer srv.Close()
	var signing atomic.Pointer[auth.Key]
	signing.Store(&oldKey)
	call := func(key auth.Key) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/operator/recovery", nil)
		req.Header.Set("Authorization", "Bearer "+sign(t, key, claims("alice", auth.RoleOperator, "", time.Hour)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	const workers = 4
	var done [workers]atomic.Int64       // requests answered, per worker
	progressed := make(chan struct{}, 1) // a request was answered
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if status := call(*signing.Load()); status != http.StatusOK {
					failed.Add(1)
					t.Errorf("request during the rotation: %d", status)
				}
				done[w].Add(1)
				select {
				case progressed <- struct{}{}:
				default:
				}
			}
		}()
	}
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // also when the test fails early
	// traffic waits until every worker answered two more requests: at least
	// one of each was sent after the step before it, with its key.
	traffic := func(step string) {
		t.Helper()
		var from [workers]int64
		for w := range workers {
			from[w] = done[w].Load()
		}
		timeout := time.After(30 * time.Second)
		for {
			all := true
			for w := range workers {
				all = all && done[w].Load() >= from[w]+2
			}
			if all {
				return
			}
			select {
			case <-progressed:
			case <-timeout:
				t.Fatalf("%s: the workers answered no requests for 30 s", step)
			}
		}
	}
	traffic("before the rotation")
	if err := auth.WriteJWKS(path, oldKey, newKey); err != nil { // 1. publish the new key
		t.Fatal(err)
	}
	// The issuer switches once the verifier knows the new key: it reads the
	// document again in the background once it is older than Refresh, and
	// nothing tells when, so polled.
	for deadline := time.Now().Add(30 * time.Second); call(newKey) != http.StatusOK; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the new key is still refused 30 s after its publication")
		}
	}
	traffic("both keys published")
	if status := call(oldKey); status != http.StatusOK {
		t.Fatalf("old key while both are published: %d", status)
	}
	signing.Store(&newKey) // 2. the issuer signs with the new key
	traffic("signing with the new key")
	if status := call(oldKey); status != http.StatusOK {
		t.Fatalf("an old token before the old key is removed: %d", status)
	}
	if err := auth.WriteJWKS(path, newKey); err != nil { // 3. remove the old key
		t.Fatal(err)
	}
	// Read again in the background as above: polled until the old key is
	// refused.
	for deadline := time.Now().Add(30 * time.Second); call(oldKey) != http.StatusUnauthorized; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the old key is still accepted 30 s after its removal")
		}
	}
	traffic("the old key removed")
	halt()
	if status := call(oldKey); status != http.StatusUnauthorized {
		t.Fatalf("old key after its removal: %d, want 401", status)
	}
	if status := call(newKey); status != http.StatusOK {
		t.Fatalf("new key: %d", status)
	}
	if failed.Load() != 0 || sent.Load() < 20 {
		t.Fatalf("%d of %d requests failed", failed.Load(), sent.Load())
	}
	t.Logf("%d requests during the rotation, none failed", sent.Load())
}

// A new kid is accepted at once, without waiting for the refresh: an unknown
// kid reads the document again.
func TestNewKidWithoutWaiting(t *testing.T) {
	oldKey, newKey := mustKey("a"), mustKey("b")
	path := writeJWKS(t, oldKey)
	k, err := auth.New(auth.Config{Service: "billing", Issuer: issuer, JWKS: path, Refresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// An unknown kid reads the document again at most once a second: a
	// deliberate wait past that second since New read it.
	time.Sleep(1100 * time.Millisecond)
	if err := auth.WriteJWKS(path, oldKey, newKey); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(sign(t, newKey, claims("a", auth.RoleOperator, "", time.Hour))); err != nil {
		t.Fatal(err)
	}
	// A broken document keeps the keys read before.
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past the once-a-second guard again
	_, _ = k.Verify(sign(t, mustKey("c"), claims("a", auth.RoleOperator, "", time.Hour)))
	if _, err := k.Verify(sign(t, newKey, claims("a", auth.RoleOperator, "", time.Hour))); err != nil {
		t.Fatalf("after a broken document: %v", err)
	}
}

// The development key is refused on a request that came in on a
// non-loopback address, even by a service that accepts it.
func TestDevKeyOnlyOnLoopback(t *testing.T) {
	k, err := auth.New(auth.Config{Service: "billing", Dev: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := k.Start(nil, reg); err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(k, nil))
	r.Method(http.MethodGet, "/v1/operator/recovery", auth.Allow(func(http.ResponseWriter, *http.Request) {}, auth.RoleOperator))
	for _, tt := range []struct {
		local string
		want  int
	}{{"127.0.0.1:8083", 200}, {"[::1]:8083", 200}, {"10.0.0.5:8083", 401}, {"0.0.0.0:8083", 401}, {"", 401}} {
		req := httptest.NewRequest(http.MethodGet, "/v1/operator/recovery", nil)
		if tt.local != "" {
			addr, err := net.ResolveTCPAddr("tcp", tt.local)
			if err != nil {
				t.Fatal(err)
			}
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, net.Addr(addr)))
		}
		req.Header.Set("Authorization", "Bearer "+auth.DevToken(auth.RoleOperator, ""))
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("dev token on %q: %d, want %d (%s)", tt.local, rec.Code, tt.want, rec.Body)
		}
		if tt.want == 401 && !strings.Contains(rec.Body.String(), "development key refused") {
			t.Errorf("dev token on %q: %s", tt.local, rec.Body)
		}
	}
	mfs, _ := reg.Gather()
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "auth_dev_key_in_use" && mf.GetMetric()[0].GetGauge().GetValue() == 1 {
			found = true
		}
	}
	if !found {
		t.Error("auth_dev_key_in_use is not 1")
	}
}

func TestParseJWKS(t *testing.T) {
	x := base64.RawURLEncoding.EncodeToString(key.Public())
	for _, tt := range []struct{ name, doc, err string }{
		{"good", `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","use":"sig","alg":"EdDSA"}]}`, ""},
		{"private", `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","d":"` + x + `"}]}`, "private"},
		{"RSA", `{"keys":[{"kty":"RSA","kid":"a","n":"x","e":"AQAB"}]}`, "OKP"},
		{"dup", `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"},{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}]}`, "twice"},
		{"short x", `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"AAAA"}]}`, "x is not"},
		{"dev kid", `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"dev","x":"` + x + `"}]}`, "development"},
		{"empty", `{"keys":[]}`, "no key"},
	} {
		_, err := auth.ParseJWKS([]byte(tt.doc))
		if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.err)
		}
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
	op := sign(t, key, claims("alice", auth.RoleOperator, "", time.Minute))
	acme := sign(t, key, claims("bob", auth.RoleTenant, "acme", time.Minute))
	vc := claims("carol", auth.RoleViewer, "acme", time.Minute)
	viewer := sign(t, key, vc)
	sc := auth.NewClaims("query", auth.RoleService, "", time.Minute)
	sc.Issuer, sc.Audience = "query", jwt.ClaimStrings{"billing"}
	svc := sign(t, queryKey, sc)
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
	anyTenant := chi.NewRouter()
	anyTenant.Method(http.MethodGet, "/v1/meters", auth.AllowAnyTenant(h, auth.RoleViewer, auth.RoleCatalogAdmin))
	if err := auth.Check(anyTenant); err != nil {
		t.Fatalf("Check of an AllowAnyTenant route: %v", err)
	}
}

// TestAllowAnyTenant: a tenant-scoped role of any tenant reaches an
// AllowAnyTenant route; a role it does not admit does not.
func TestAllowAnyTenant(t *testing.T) {
	g := auth.AllowAnyTenant(func(http.ResponseWriter, *http.Request) {}, auth.RoleViewer, auth.RoleCatalogAdmin)
	for _, c := range []struct {
		claims auth.Claims
		want   bool
	}{
		{auth.NewClaimsRoles("a", "acme", time.Hour, auth.RoleViewer), true},
		{auth.NewClaimsRoles("b", "globex", time.Hour, auth.RoleViewer), true},
		{auth.NewClaimsRoles("c", "", time.Hour, auth.RoleCatalogAdmin), true},
		{auth.NewClaimsRoles("d", "acme", time.Hour, auth.RoleIngest), false},
		{auth.NewClaimsRoles("e", "", time.Hour, auth.RoleOperator), false},
	} {
		if got := g.Admits(c.claims, ""); got != c.want {
			t.Errorf("Admits(%v of %q) = %v, want %v", c.claims.Roles, c.claims.Tenant, got, c.want)
		}
	}
	if auth.Allow(func(http.ResponseWriter, *http.Request) {}, auth.RoleViewer).Admits(auth.NewClaimsRoles("a", "acme", time.Hour, auth.RoleViewer), "") {
		t.Error("Allow admits a tenant role on a route without a tenant")
	}
}
