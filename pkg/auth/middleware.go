package auth

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/usagebilling/billing/pkg/httpx"
)

// Rule is how Middleware treats a path before routing.
type Rule int

const (
	// Open: anyone (/healthz, /readyz, /metrics, /openapi.json); no route
	// there declares roles.
	Open Rule = iota
	// Bearer: a valid bearer token is required (401 otherwise); the route's
	// declared roles (Allow) decide the rest (403).
	Bearer
	// Console: the operator console (query's /console). A browser sends no
	// bearer header, so the middleware lets these paths through; the
	// console's session puts the claims of its cookie in the context, and
	// each console route declares the operator role like any other route.
	Console
)

// OpenPaths are the paths anyone may call.
var OpenPaths = []string{"/healthz", "/readyz", "/metrics", "/openapi.json"}

// RuleFor returns the rule of a request path.
//
//	/healthz, /readyz, /metrics   Open
//	/openapi.json                 Open (the service's API document)
//	/console, /console/...        Console
//	anything else                 Bearer
func RuleFor(path string) Rule {
	switch {
	case path == "/healthz" || path == "/readyz" || path == "/metrics" || path == "/openapi.json":
		return Open
	case path == "/console" || strings.HasPrefix(path, "/console/"):
		return Console
	default:
		return Bearer
	}
}

type ctxKey struct{}

type logKey struct{}

// FromContext returns the verified claims of the request's bearer.
func FromContext(ctx context.Context) (Claims, bool) {
	c, ok := ctx.Value(ctxKey{}).(Claims)
	return c, ok
}

// ActorOf returns the actor a money-changing or audited command is
// recorded under: the subject of the request's verified bearer token, or
// 401 unauthorized when there is none, 400 control_character when it holds
// a control character (httpx.FreeText).
func ActorOf(r *http.Request) (string, *httpx.Problem) {
	c, ok := FromContext(r.Context())
	if !ok || c.Actor() == "" {
		return "", httpx.NewProblem(http.StatusUnauthorized, "unauthorized",
			"a money-changing command needs a bearer token naming its actor")
	}
	if p := httpx.FreeText("the token's subject (the actor)", c.Actor()); p != nil {
		return "", p
	}
	return c.Actor(), nil
}

// WithClaims returns ctx carrying c (what Middleware does for a request).
func WithClaims(ctx context.Context, c Claims) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

func logFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(logKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// Middleware authenticates every request but those of Open and Console
// paths: a missing bearer token is 401 unauthorized, a malformed, wrongly
// signed or expired one 401 invalid_token; neither reaches routing, and
// each takes a token of its address's rate-limit bucket (httpx.Limit,
// httpx.CallerKey), never of the tenant its path names. A valid
// token's claims go in the request's context, where the route's Guard
// (Allow) checks its roles and tenant.
func Middleware(keys Keys, log *slog.Logger) func(http.Handler) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := context.WithValue(r.Context(), logKey{}, log)
			path := r.URL.RawPath
			if path == "" {
				path = r.URL.Path
			}
			if rule := RuleFor(path); rule == Open || rule == Console {
				next.ServeHTTP(w, r.WithContext(ctx))
				return
			}
			token, ok := bearer(r)
			// A refused token is no identity: its refusal spends its
			// address's bucket, and is logged only when answered 401.
			addr := httpx.CallerKey(r, "", "", "")
			if !ok {
				if httpx.Limit(w, r, addr) {
					unauthorized(w, "unauthorized", "a bearer token is required")
				}
				return
			}
			c, kid, err := keys.verify(token)
			if err == nil && IsDevKeyID(kid) {
				if !loopback(r) {
					err = fmt.Errorf("%w: %w", ErrInvalidToken, errDevKey)
				} else {
					keys.v.devCalls.Inc()
				}
			}
			if err != nil {
				if !httpx.Limit(w, r, addr) {
					return
				}
				log.InfoContext(ctx, "token refused", "method", r.Method, "path", path, "err", err)
				unauthorized(w, "invalid_token", "the bearer token is refused: "+Reason(err))
				return
			}
			next.ServeHTTP(w, r.WithContext(WithClaims(ctx, c)))
		})
	}
}

// loopback reports whether r came in on a loopback address of this host.
func loopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func unauthorized(w http.ResponseWriter, code, detail string) {
	if code == "invalid_token" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="usagebilling", error="invalid_token"`)
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="usagebilling"`)
	}
	httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnauthorized, code, detail))
}

func forbidden(w http.ResponseWriter) {
	httpx.WriteProblem(w, httpx.NewProblem(http.StatusForbidden, "forbidden", "the credential does not allow this request"))
}
