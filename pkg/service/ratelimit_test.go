package service

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/auth"
)

// Tenant A's token sending to tenant B's paths is refused 403 without
// touching B's bucket: B's own requests still get through. A's refusals,
// and those of requests without a token, are limited by the caller (its
// subject, or its address), so a refused caller cannot call for free either.
func TestRateLimitComesAfterAuthorisation(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(NewEnvFrom(map[string]string{"DATABASE_URL": "postgres://unused/x", "AUTH_DEV_KEY": "true"}), "billing", 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RateLimit, cfg.RateBurst = 0.01, 3 // no refill within the test
	reg := prometheus.NewRegistry()
	r := newRouter(Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Metrics: reg}, reg, nil)
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/summary", auth.Allow(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}, auth.RoleViewer))
	addr := serveHTTP(t, cfg, r)
	get := func(token, tenant string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/v1/tenants/"+tenant+"/summary", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	token := func(subject, tenant string) string {
		t.Helper()
		s, err := auth.Token(auth.DevKey, auth.NewClaims(subject, auth.RoleViewer, tenant, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tokenA, tokenB := token("alice", "acme"), token("bob", "beta")
	var refused []int
	for range 6 {
		refused = append(refused, get(tokenA, "beta"))
	}
	for i, code := range refused {
		want := http.StatusForbidden
		if i >= cfg.RateBurst {
			want = http.StatusTooManyRequests // A's own refusals, limited by A's subject
		}
		if code != want {
			t.Fatalf("A's request %d to B: %d, want %d (all: %v)", i, code, want, refused)
		}
	}
	if code := get(tokenB, "beta"); code != http.StatusNoContent {
		t.Fatalf("B's own request after A's refusals: %d, want 204 (A drained B's bucket)", code)
	}
	if code := get(tokenA, "acme"); code != http.StatusNoContent {
		t.Fatalf("A's request to its own tenant: %d, want 204 (its refusals took its tenant's tokens)", code)
	}
	refused = refused[:0]
	for range 6 {
		refused = append(refused, get("", "beta"))
	}
	if refused[0] != http.StatusUnauthorized || refused[5] != http.StatusTooManyRequests {
		t.Fatalf("requests without a token: %v, want 401 then 429 once the address's burst is spent", refused)
	}
	if code := get(tokenB, "beta"); code != http.StatusNoContent {
		t.Fatalf("B's request after the unauthenticated ones: %d, want 204", code)
	}
}
