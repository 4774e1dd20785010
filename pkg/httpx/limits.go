package httpx

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Deadline gives every request a context that ends after d. Handlers pass it
// to the database (pgx cancels the query) and to outgoing calls, so a
// request cannot hold a connection and a pooled database connection longer
// than d. A handler still running when the deadline passes answers 503
// problem+json "timeout" instead of whatever it writes afterwards (typically
// its own "database_unavailable"), and one that returns having written
// nothing gets the same answer. What a handler wrote before the deadline
// stands. The server's WriteTimeout is the backstop for a handler that
// ignores its context. A handler that reads a whole period on purpose
// (reconciliation) takes more time with ExtendDeadline.
func Deadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancelCause(r.Context())
			dl := &requestDeadline{timer: time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })}
			defer dl.timer.Stop()
			defer cancel(nil)
			ctx = context.WithValue(ctx, deadlineKey{}, dl)
			tw := &deadlineWriter{ResponseWriter: w, ctx: ctx}
			next.ServeHTTP(tw, r.WithContext(ctx))
			if !tw.wroteHeader && expired(ctx) {
				tw.timeout()
			}
		})
	}
}

type deadlineKey struct{}

// requestDeadline ends a request's context when its timer fires.
type requestDeadline struct{ timer *time.Timer }

// expired reports whether ctx ended by its request deadline.
func expired(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), context.DeadlineExceeded)
}

// ExtendDeadline gives the request d from now, instead of what is left of
// the deadline Deadline set (when it has not passed yet), and moves the
// connection's write deadline past it: for the few reads that cover a whole
// period on purpose. Without Deadline in front, it only moves the write
// deadline.
func ExtendDeadline(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if dl, ok := r.Context().Value(deadlineKey{}).(*requestDeadline); ok && !expired(r.Context()) {
		dl.timer.Reset(d)
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + 10*time.Second))
}

// TimeoutProblem is the answer to a request that ran past its deadline.
func TimeoutProblem() *Problem {
	return NewProblem(http.StatusServiceUnavailable, "timeout",
		"the request ran past its deadline and was stopped; what it changed was rolled back unless it answered, retry later")
}

type deadlineWriter struct {
	http.ResponseWriter
	ctx         context.Context
	wroteHeader bool
	discard     bool // the deadline passed first: the handler's writes are dropped
}

func (w *deadlineWriter) timeout() {
	w.wroteHeader, w.discard = true, true
	WriteProblem(w.ResponseWriter, TimeoutProblem())
}

func (w *deadlineWriter) WriteHeader(status int) {
	if w.wroteHeader {
		if !w.discard {
			w.ResponseWriter.WriteHeader(status) // let net/http log the superfluous call
		}
		return
	}
	if expired(w.ctx) && status >= 500 {
		w.timeout()
		return
	}
	w.wroteHeader = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.discard {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush, deadlines).
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// RateLimiter limits each tenant's requests with a token bucket held in
// memory by this process: Burst tokens, refilled at Rate per second; a
// request takes one. Several instances of a service each limit on their own.
type RateLimiter struct {
	rate  float64
	burst float64
	now   func() time.Time
	// OnLimited, when set, is called for each refused request.
	OnLimited func(tenantID string)

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxIdleBuckets: beyond this many tenants, full buckets are forgotten (a
// full bucket is what a new one would be), so the map stays bounded by the
// tenants active within one refill time.
const maxIdleBuckets = 10000

// NewRateLimiter returns a limiter of rate requests per second per tenant
// with bursts of burst.
func NewRateLimiter(rate float64, burst int) *RateLimiter {
	return &RateLimiter{rate: rate, burst: float64(max(burst, 1)), now: time.Now, buckets: map[string]*bucket{}}
}

// Allow takes a token of tenantID's bucket; when there is none it returns
// false and how long until there is one.
func (l *RateLimiter) Allow(tenantID string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[tenantID]
	if !ok {
		if len(l.buckets) >= maxIdleBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[tenantID] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+el*l.rate)
	}
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

func (l *RateLimiter) sweep(now time.Time) {
	for t, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, t)
		}
	}
}

// Middleware refuses a request to /v1/tenants/{tenantId}/... past its
// tenant's rate with 429 problem+json "rate_limited" and Retry-After (whole
// seconds, at least 1). Other paths are not limited. Mount it after
// authentication, so only a tenant's accepted requests use its tokens.
func (l *RateLimiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := tenantOfPath(r.URL.Path)
		if ok {
			if allowed, wait := l.Allow(tenant); !allowed {
				if l.OnLimited != nil {
					l.OnLimited(tenant)
				}
				secs := max(1, int(math.Ceil(wait.Seconds())))
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				WriteProblem(w, Problemf(http.StatusTooManyRequests, "rate_limited",
					"this tenant's requests exceed %g per second (bursts of %g); retry after %d s", l.rate, l.burst, secs))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// tenantOfPath returns the tenant of /v1/tenants/{tenantId}/..., when it is
// a valid tenant id.
func tenantOfPath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/tenants/")
	if !ok {
		return "", false
	}
	t, _, _ := strings.Cut(rest, "/")
	if _, p := TenantID(t); p != nil {
		return "", false
	}
	return t, true
}

// MaxHeaderBytes refuses a request whose request line and headers exceed n
// bytes with 431 problem+json "headers_too_large". The server's own limit
// (http.Server.MaxHeaderBytes) is set above n as a backstop: past it net/http
// answers 431 itself, in plain text, before any handler runs.
func MaxHeaderBytes(n int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			size := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
			for k, vs := range r.Header {
				for _, v := range vs {
					size += len(k) + len(v) + 4
				}
			}
			if size > n {
				WriteProblem(w, Problemf(http.StatusRequestHeaderFieldsTooLarge, "headers_too_large",
					"the request line and headers exceed %d bytes", n))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
