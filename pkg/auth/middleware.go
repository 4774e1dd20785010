package auth

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/usagebilling/billing/pkg/httpx"
)

// Rule is who may call a path.
type Rule int

const (
	// Open: anyone (/healthz, /readyz, /metrics).
	Open Rule = iota
	// Tenant: a tenant token for the path's tenant, or an operator.
	Tenant
	// Operator: an operator.
	Operator
	// Internal: another service, or an operator.
	Internal
	// Console: the operator console (query's /console). A browser sends no
	// bearer header, so the middleware lets these paths through and the
	// console checks its session cookie itself, with the same keys and the
	// operator role (services/query/internal/console).
	Console
)

// RuleFor returns the rule of a request path, and the tenant of a tenant
// path. Paths the policy does not name need an operator, so a new route is
// closed until the policy opens it.
//
//	/healthz, /readyz, /metrics   Open
//	/v1/tenants/{tenantId}/...    Tenant
//	/v1/operator/...              Operator
//	/internal/...                 Internal
//	/console, /console/...        Console
//	anything else                 Operator
func RuleFor(path string) (Rule, string) {
	switch {
	case path == "/healthz" || path == "/readyz" || path == "/metrics":
		return Open, ""
	case strings.HasPrefix(path, "/v1/tenants/"):
		tenant, _, _ := strings.Cut(strings.TrimPrefix(path, "/v1/tenants/"), "/")
		return Tenant, tenant
	case strings.HasPrefix(path, "/internal/"):
		return Internal, ""
	case path == "/console" || strings.HasPrefix(path, "/console/"):
		return Console, ""
	default:
		return Operator, ""
	}
}

type ctxKey struct{}

// FromContext returns the verified claims of the request's bearer.
func FromContext(ctx context.Context) (Claims, bool) {
	c, ok := ctx.Value(ctxKey{}).(Claims)
	return c, ok
}

// WithClaims returns ctx carrying c (what Middleware does for a request).
func WithClaims(ctx context.Context, c Claims) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// Middleware enforces RuleFor on every request: a missing, malformed,
// wrongly signed or expired bearer token is 401 unauthorized; a valid token
// whose role or tenant does not fit the path is 403 forbidden. Neither
// reaches the handler. The path is the one chi routes on (the raw, escaped
// path when there is one), so the tenant checked is the tenant routed to.
func Middleware(keys Keys, log *slog.Logger) func(http.Handler) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			path := r.URL.RawPath
			if path == "" {
				path = r.URL.Path
			}
			rule, tenant := RuleFor(path)
			if rule == Open || rule == Console {
				next.ServeHTTP(w, r)
				return
			}
			token, ok := bearer(r)
			if !ok {
				unauthorized(w, "a bearer token is required")
				return
			}
			c, err := keys.Verify(token)
			if err != nil {
				log.InfoContext(r.Context(), "token refused", "method", r.Method, "path", path, "err", err)
				unauthorized(w, "the bearer token is invalid or expired")
				return
			}
			if !allowed(rule, tenant, c) {
				log.InfoContext(r.Context(), "request forbidden", "method", r.Method, "path", path,
					"sub", c.Subject, "role", c.Role, "tenant", c.Tenant)
				httpx.WriteProblem(w, httpx.NewProblem(http.StatusForbidden, "forbidden", "the credential does not allow this request"))
				return
			}
			next.ServeHTTP(w, r.WithContext(WithClaims(r.Context(), c)))
		})
	}
}

func allowed(rule Rule, tenant string, c Claims) bool {
	switch rule {
	case Tenant:
		return c.Role == RoleOperator || (c.Role == RoleTenant && tenant != "" && c.Tenant == tenant)
	case Internal:
		return c.Role == RoleService || c.Role == RoleOperator
	default:
		return c.Role == RoleOperator
	}
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

func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="usagebilling"`)
	httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnauthorized, "unauthorized", detail))
}
