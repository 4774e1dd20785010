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
	time.Sleep(1100 * time.Millisecond) // Retry-After: 1
	if rec := do("/v1/tenants/acme/usage"); rec.Code != http.StatusNoContent {
		t.Fatalf("after Retry-After: %d", rec.Code)
	}
}

// Without a limiter in the context (RATE_LIMIT_RPS=0), Limit lets every
// request through; a refused request's key is its caller, or its address.
func TestLimitWithoutLimiterAndCallerKeys(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/tenants/acme/x", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	for range 10 {
		if !Limit(httptest.NewRecorder(), r, TenantKey("acme")) {
			t.Fatal("limited without a limiter")
		}
	}
	if k := CallerKey(r, "iss", "acme", "alice"); k != "caller/iss/acme/alice" {
		t.Fatalf("caller key %q", k)
	}
	if k := CallerKey(r, "", "", ""); k != "addr/192.0.2.7" {
		t.Fatalf("address key %q", k)
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
