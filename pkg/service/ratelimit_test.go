package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/auth"
)

// The rate-limit tests run real HTTP through the router the services use
// (NewRouter: auth.Middleware, the limiter, each route's Guard) with a
// bucket that does not refill within a test (one token per 1,000 s), so
// they count answers instead of timing them.

const testBurst = 4

// limitStack is NewRouter with one tenant route, served on a loopback
// port, and what the tests read of it.
type limitStack struct {
	t       *testing.T
	addr    string
	metrics *prometheus.Registry
	logs    *recordNames
}

func newLimitStack(t *testing.T) *limitStack {
	t.Helper()
	cfg, err := LoadConfig(NewEnvFrom(map[string]string{"DATABASE_URL": "postgres://unused/x", "AUTH_DEV_KEY": "true"}), "billing", 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RateLimit, cfg.RateBurst = 0.001, testBurst
	logs := &recordNames{}
	reg := prometheus.NewRegistry()
	d := Deps{Config: cfg, Logger: slog.New(logs), Metrics: reg}
	r := NewRouter(d, reg, Parts{Routes: func(r chi.Router) {
		r.Method(http.MethodGet, "/v1/tenants/{tenantId}/summary", auth.Allow(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
		}, auth.RoleViewer))
	}})
	return &limitStack{t: t, addr: serveHTTP(t, cfg, r), metrics: reg, logs: logs}
}

// answer is a status and the problem code of its body, if any.
type answer struct {
	status int
	code   string
}

// send sends method path with token ("" for none) from the loopback
// address from (127.0.0.x: each its own client address).
func (s *limitStack) send(from, method, path, token string) answer {
	s.t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(s.t.Context(), method, "http://"+s.addr+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Code string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode == http.StatusTooManyRequests && (p.Code != "rate_limited" || resp.Header.Get("Retry-After") == "") {
		s.t.Fatalf("%s %s: 429 %q with Retry-After %q, want rate_limited with Retry-After", method, path, p.Code, resp.Header.Get("Retry-After"))
	}
	return answer{resp.StatusCode, p.Code}
}

// get is send of GET /v1/tenants/{tenant}/summary from 127.0.0.1.
func (s *limitStack) get(token, tenant string) int {
	s.t.Helper()
	return s.send("127.0.0.1", http.MethodGet, "/v1/tenants/"+tenant+"/summary", token).status
}

// limited is http_rate_limited_total.
func (s *limitStack) limited() float64 {
	s.t.Helper()
	mfs, err := s.metrics.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "http_rate_limited_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func viewerToken(t *testing.T, subject, tenant string) string {
	t.Helper()
	s, err := auth.Token(auth.DevKey, auth.NewClaims(subject, auth.RoleViewer, tenant, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// statuses counts answers by status.
func statuses(as []int) map[int]int {
	n := map[int]int{}
	for _, a := range as {
		n[a]++
	}
	return n
}

// Tenant A's token hammering tenant B's paths is refused 403, then 429 once
// A's own refusal bucket is spent, while B's requests, sent between A's, all
// get through: A's refusals never touch B's bucket. B is still limited by
// its own requests, and A's refusals did not spend A's tenant's bucket.
func TestRateLimitComesAfterAuthorisation(t *testing.T) {
	t.Parallel()
	s := newLimitStack(t)
	alice, bob := viewerToken(t, "alice", "acme"), viewerToken(t, "bob", "beta")
	var fromA, fromB []int
	for i := range 3 * testBurst {
		fromA = append(fromA, s.get(alice, "beta"))
		if i < testBurst {
			fromB = append(fromB, s.get(bob, "beta"))
		}
	}
	wantA := slices.Concat(slices.Repeat([]int{http.StatusForbidden}, testBurst), slices.Repeat([]int{http.StatusTooManyRequests}, 2*testBurst))
	if !slices.Equal(fromA, wantA) {
		t.Errorf("A's requests to B's path: %v, want %d x 403 then 429 (A's own bucket)", fromA, testBurst)
	}
	if n := statuses(fromB); n[http.StatusOK] != testBurst {
		t.Errorf("B's own requests between A's: %v, want every one 200 (A spent B's bucket)", fromB)
	}
	if got := s.get(bob, "beta"); got != http.StatusTooManyRequests {
		t.Errorf("B's request past its own burst: %d, want 429", got)
	}
	if got := s.get(alice, "acme"); got != http.StatusOK {
		t.Errorf("A's request to its own tenant: %d, want 200 (its refusals spent its tenant's bucket)", got)
	}
	if got := s.get(viewerToken(t, "carol", "acme"), "beta"); got != http.StatusForbidden {
		t.Errorf("another caller of tenant A to B's path: %d, want 403 (a bucket per caller, not per tenant)", got)
	}
	if got := s.limited(); got != float64(2*testBurst+1) {
		t.Errorf("http_rate_limited_total %v, want %d", got, 2*testBurst+1)
	}
}

// Requests without a valid token are limited by their address: an address
// flooding 401s gets 429, for a missing and for a refused token alike;
// another address still gets its 401, and a valid token from the flooding
// address still reaches its tenant.
func TestRateLimitRefusedWithoutTokenByAddress(t *testing.T) {
	t.Parallel()
	s := newLimitStack(t)
	path := "/v1/tenants/beta/summary"
	var flood []answer
	for i := range 3 * testBurst {
		token := ""
		if i%2 == 1 {
			token = "not-a-jwt"
		}
		flood = append(flood, s.send("127.0.0.1", http.MethodGet, path, token))
	}
	for i, a := range flood {
		want := http.StatusUnauthorized
		if i >= testBurst {
			want = http.StatusTooManyRequests
		}
		if a.status != want {
			t.Fatalf("unauthenticated request %d from 127.0.0.1: %d, want %d (all: %v)", i, a.status, want, flood)
		}
	}
	if a := s.send("127.0.0.2", http.MethodGet, path, ""); a.status != http.StatusUnauthorized || a.code != "unauthorized" {
		t.Errorf("a request without a token from another address: %v, want 401 unauthorized", a)
	}
	if a := s.send("127.0.0.2", http.MethodGet, path, "not-a-jwt"); a.status != http.StatusUnauthorized || a.code != "invalid_token" {
		t.Errorf("a refused token from another address: %v, want 401 invalid_token", a)
	}
	if got := s.get(viewerToken(t, "bob", "beta"), "beta"); got != http.StatusOK {
		t.Errorf("B's request from the flooding address: %d, want 200", got)
	}
}

// A request that names no route (404, 405) is a refusal like any other: it
// spends its caller's bucket, never the bucket of the tenant its path names.
func TestRateLimitNoRouteByCaller(t *testing.T) {
	t.Parallel()
	s := newLimitStack(t)
	alice, bob := viewerToken(t, "alice", "acme"), viewerToken(t, "bob", "beta")
	var fromA []int
	for i := range 3 * testBurst {
		method, path := http.MethodGet, "/v1/tenants/beta/nosuch"
		if i%2 == 1 {
			method, path = http.MethodPost, "/v1/tenants/beta/summary"
		}
		fromA = append(fromA, s.send("127.0.0.1", method, path, alice).status)
	}
	if n := statuses(fromA); n[http.StatusNotFound]+n[http.StatusMethodNotAllowed] != testBurst || n[http.StatusTooManyRequests] != 2*testBurst {
		t.Errorf("A's requests to no route under B's path: %v, want %d x 404/405 then 429", fromA, testBurst)
	}
	for i := range testBurst {
		if got := s.get(bob, "beta"); got != http.StatusOK {
			t.Fatalf("B's request %d: %d, want 200 (A's 404s spent B's bucket)", i, got)
		}
	}
}

// A refusal past its caller's rate is answered 429 without being logged:
// a flood of refusals is not a flood of log lines.
func TestRateLimitedRefusalsAreNotLogged(t *testing.T) {
	t.Parallel()
	s := newLimitStack(t)
	alice := viewerToken(t, "alice", "acme")
	for range 3 * testBurst {
		s.get(alice, "beta")
		s.get("not-a-jwt", "beta")
	}
	if got := s.logs.count("request forbidden"); got != testBurst {
		t.Errorf("%d records of a forbidden request, want %d (one per 403 answered)", got, testBurst)
	}
	if got := s.logs.count("token refused"); got != testBurst {
		t.Errorf("%d records of a refused token, want %d (one per 401 answered)", got, testBurst)
	}
}

// recordNames is a slog.Handler that keeps the message of each record.
type recordNames struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordNames) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordNames) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}

func (h *recordNames) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordNames) WithGroup(string) slog.Handler      { return h }

func (h *recordNames) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.EqualFold(m, msg) {
			n++
		}
	}
	return n
}
