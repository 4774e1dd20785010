package httpx

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/netip"
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

// RateLimiter limits requests with token buckets held in memory by this
// process: Burst tokens per key, refilled at Rate per second; a request
// takes one. Several instances of a service each limit on their own.
//
// The key is chosen once access is decided (see Limit): a request admitted
// to /v1/tenants/{tenantId}/... takes its tenant's token (TenantKey), a
// refused one (401, 403, 404) its caller's (CallerKey), so no caller can
// spend another tenant's tokens, and a refused caller is limited all the
// same.
type RateLimiter struct {
	rate  float64
	burst float64
	now   func() time.Time
	// OnLimited, when set, is called for each refused request with the key
	// of the spent bucket (TenantKey, CallerKey).
	OnLimited func(key string)

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxIdleBuckets: beyond this many keys, full buckets are forgotten (a
// full bucket is what a new one would be), so the map stays bounded by the
// keys active within one refill time.
const maxIdleBuckets = 10000

// NewRateLimiter returns a limiter of rate requests per second per key
// with bursts of burst.
func NewRateLimiter(rate float64, burst int) *RateLimiter {
	return &RateLimiter{rate: rate, burst: float64(max(burst, 1)), now: time.Now, buckets: map[string]*bucket{}}
}

// Allow takes a token of key's bucket; when there is none it returns false
// and how long until there is one.
func (l *RateLimiter) Allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxIdleBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
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

type limiterKey struct{}

// Middleware puts l in each request's context, where the route's access
// check (auth.Guard, and auth.Middleware for a refused token) takes a token
// with Limit once it knows who may call: it takes none itself, so a request
// refused 401, 403 or 404 never spends the tenant's tokens of the path it
// names.
// Mount it before authentication.
func (l *RateLimiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), limiterKey{}, l)))
	})
}

// TenantKey is the bucket of an admitted request to tenant's paths.
func TenantKey(tenant string) string { return "tenant/" + tenant }

// CallerKey is the bucket of a refused request: its caller's identity (the
// issuer and subject of its verified token, with the token's tenant), or
// its address when it has no verified token. An IPv6 address counts by its
// /64, the block one host is given, so a caller cannot spread its refusals
// over the addresses of its own network; an IPv4-mapped one as IPv4.
func CallerKey(r *http.Request, issuer, tenant, subject string) string {
	if subject != "" {
		return "caller/" + issuer + "/" + tenant + "/" + subject
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap().WithZone("")
		host = ip.String()
		if ip.Is6() {
			host = netip.PrefixFrom(ip, 64).Masked().String()
		}
	}
	return "addr/" + host
}

// Limit takes a token of key's bucket from the rate limiter Middleware put
// in r's context; past the rate it answers 429 problem+json "rate_limited"
// with Retry-After (whole seconds, at least 1) and returns false. Without a
// limiter (RATE_LIMIT_RPS=0) it returns true.
func Limit(w http.ResponseWriter, r *http.Request, key string) bool {
	l, ok := r.Context().Value(limiterKey{}).(*RateLimiter)
	if !ok {
		return true
	}
	allowed, wait := l.Allow(key)
	if allowed {
		return true
	}
	if l.OnLimited != nil {
		l.OnLimited(key)
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	WriteProblem(w, Problemf(http.StatusTooManyRequests, "rate_limited",
		"these requests exceed %g per second (bursts of %g); retry after %d s", l.rate, l.burst, secs))
	return false
}

// LimitTenant is Limit for an admitted request: the token of the tenant of
// its /v1/tenants/{tenantId}/... path, when that is a valid tenant id;
// requests to other paths are not limited. Call it only once access to that
// tenant is decided (auth.Guard does).
func LimitTenant(w http.ResponseWriter, r *http.Request) bool {
	tenant, ok := tenantOfPath(r.URL.Path)
	if !ok {
		return true
	}
	return Limit(w, r, TenantKey(tenant))
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
