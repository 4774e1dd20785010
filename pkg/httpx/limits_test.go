package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The per-tenant limit answers 429 rate_limited with Retry-After once a
// tenant's burst is spent, leaves other tenants and other paths alone, and
// lets the tenant through again once its bucket refilled. The middleware
// itself takes no token: the access check does, with LimitTenant.
func TestRateLimitAnswers429AndRecovers(t *testing.T) {
	t.Parallel()
	l := NewRateLimiter(2, 2) // 2 requests/s, bursts of 2
	now := time.Date(2026, 11, 5, 12, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now } // the bucket refills when the test says
	limited := 0
	l.OnLimited = func(string) { limited++ }
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if LimitTenant(w, r) {
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	do := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, nil))
		return rec
	}
	for i := range 2 {
		if rec := do("/v1/tenants/acme/usage"); rec.Code != http.StatusNoContent {
			t.Fatalf("request %d within the burst: %d", i, rec.Code)
		}
	}
	rec := do("/v1/tenants/acme/usage:batch")
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusTooManyRequests || p.Code != "rate_limited" || rec.Header().Get("Retry-After") != "1" ||
		rec.Header().Get("Content-Type") != "application/problem+json" || limited != 1 {
		t.Fatalf("past the burst: %d %v %+v Retry-After %q", rec.Code, rec.Header(), p, rec.Header().Get("Retry-After"))
	}
	if rec := do("/v1/tenants/beta/usage"); rec.Code != http.StatusNoContent {
		t.Fatalf("another tenant: %d", rec.Code)
	}
	for range 5 {
		if rec := do("/v1/operator/recovery"); rec.Code != http.StatusNoContent {
			t.Fatalf("a path without a tenant: %d", rec.Code)
		}
	}
	now = now.Add(400 * time.Millisecond) // 0.8 of a token at 2/s
	if rec := do("/v1/tenants/acme/usage"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("before the bucket refilled: %d", rec.Code)
	}
	now = now.Add(600 * time.Millisecond) // Retry-After: 1 since the first refusal
	if rec := do("/v1/tenants/acme/usage"); rec.Code != http.StatusNoContent {
		t.Fatalf("after Retry-After: %d", rec.Code)
	}
}

// Without a limiter in the context (RATE_LIMIT_RPS=0), Limit lets every
// request through.
func TestLimitWithoutLimiter(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/tenants/acme/x", nil)
	for range 10 {
		if !Limit(httptest.NewRecorder(), r, TenantKey("acme")) {
			t.Fatal("limited without a limiter")
		}
	}
}

// A refused request's key is its caller, or its address without one: an
// IPv6 address by its /64 (one host's block, so a caller cannot spread its
// refusals over its own network's addresses), an IPv4-mapped one as IPv4.
func TestCallerKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		remote, issuer, tenant, subject, want string
	}{
		{"192.0.2.7:5555", "iss", "acme", "alice", "caller/iss/acme/alice"},
		{"192.0.2.7:5555", "", "", "", "addr/192.0.2.7"},
		{"[::ffff:192.0.2.7]:5555", "", "", "", "addr/192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:5555", "", "", "", "addr/2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", "", "", "", "addr/2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:5555", "", "", "", "addr/2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:5555", "", "", "", "addr/fe80::/64"},
		{"not an address", "", "", "", "addr/not an address"},
	} {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/tenants/acme/x", nil)
		r.RemoteAddr = tc.remote
		if got := CallerKey(r, tc.issuer, tc.tenant, tc.subject); got != tc.want {
			t.Errorf("CallerKey(%q, %q, %q, %q) = %q, want %q", tc.remote, tc.issuer, tc.tenant, tc.subject, got, tc.want)
		}
	}
}

// The buckets stay bounded: beyond maxIdleBuckets tenants, full ones are
// forgotten.
func TestRateLimiterForgetsFullBuckets(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	l := NewRateLimiter(100, 10)
	l.now = func() time.Time { return now }
	for i := range maxIdleBuckets + 10 {
		l.Allow("t" + string(rune('a'+i%26)) + time.Duration(i).String())
		now = now.Add(time.Second) // every earlier bucket refills
	}
	if n := len(l.buckets); n > maxIdleBuckets {
		t.Fatalf("%d buckets kept", n)
	}
}

func TestDeadlineKeepsWhatWasWrittenInTime(t *testing.T) {
	t.Parallel()
	h := Deadline(50 * time.Millisecond)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		<-r.Context().Done()
		_, _ = w.Write([]byte("late"))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/", nil))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("%d, want the 202 written before the deadline", rec.Code)
	}
}
