package auth

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/httpx"
)

// Guard is a route's handler behind the roles the route admits. Every route
// of every service is registered through Allow (or Public), next to its
// pattern:
//
//	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/prices", auth.Allow(api.activatePrice, auth.RoleBillingAdmin))
//
// and Check refuses a router with a route registered otherwise, so a new
// route has no access until it declares its roles.
type Guard struct {
	roles  []string
	public bool
	// anyTenant admits the tenant-scoped roles of every tenant (AllowAnyTenant).
	anyTenant bool
	next      http.Handler
}

// Allow returns h behind roles: a request reaches h only with verified
// claims (Middleware's bearer, or the console's session) holding one of
// roles; a tenant-scoped role reaches only the route's own {tenantId}.
// Without claims: 401 unauthorized; with claims that do not fit: 403
// forbidden. It panics on no role or an unknown one (a programming error).
func Allow(h http.HandlerFunc, roles ...string) *Guard {
	if len(roles) == 0 {
		panic("auth.Allow: no role")
	}
	for _, r := range roles {
		if !slices.Contains(Roles, r) {
			panic(fmt.Sprintf("auth.Allow: unknown role %q", r))
		}
	}
	return &Guard{roles: slices.Clone(roles), next: h}
}

// AllowAnyTenant is Allow on a route without {tenantId} that a
// tenant-scoped role of any tenant may call: a read of what belongs to no
// tenant (the meter catalog), or a command whose body names its tenants
// and whose handler checks each against the claims' (CloudEvents ingest:
// an ingest token's events must all be its own tenant's).
func AllowAnyTenant(h http.HandlerFunc, roles ...string) *Guard {
	g := Allow(h, roles...)
	g.anyTenant = true
	return g
}

// Public returns h open to anyone, with or without claims (the console's
// sign-in form).
func Public(h http.HandlerFunc) *Guard { return &Guard{public: true, next: h} }

// Roles are the roles the route admits; nil for a public route.
func (g *Guard) Roles() []string { return slices.Clone(g.roles) }

// IsPublic reports whether the route is open to anyone.
func (g *Guard) IsPublic() bool { return g.public }

// Admits reports whether claims c may call the route for tenant (the
// route's {tenantId}, "" when it has none).
func (g *Guard) Admits(c Claims, tenant string) bool {
	if g.public {
		return true
	}
	for _, role := range g.roles {
		if !c.Has(role) {
			continue
		}
		if !TenantScoped(role) || g.anyTenant || (tenant != "" && c.Tenant == tenant) {
			return true
		}
	}
	return false
}

func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.public {
		g.next.ServeHTTP(w, r)
		return
	}
	// The rate limit's token is taken once access is decided: the tenant's
	// for an admitted request, the caller's for a refused one. A refusal is
	// logged only when it is answered 403, not when its caller is past its
	// rate, so a flood of refusals is not a flood of log lines either.
	c, ok := FromContext(r.Context())
	if !ok {
		if httpx.Limit(w, r, CallerKey(r)) {
			unauthorized(w, "unauthorized", "a bearer token is required")
		}
		return
	}
	// chi routes on the raw (escaped) path, so the tenant checked is the
	// tenant routed to.
	tenant := chi.URLParam(r, "tenantId")
	if !g.Admits(c, tenant) {
		if !httpx.Limit(w, r, CallerKey(r)) {
			return
		}
		logFrom(r.Context()).InfoContext(r.Context(), "request forbidden", "method", r.Method, "path", r.URL.Path,
			"sub", c.Subject, "roles", c.Roles, "tenant", c.Tenant, "admits", g.roles)
		forbidden(w)
		return
	}
	if !httpx.LimitTenant(w, r) {
		return
	}
	g.next.ServeHTTP(w, r)
}

// CallerKey is the rate limit's bucket of a refused request
// (httpx.CallerKey): the caller of the request's verified claims, or its
// address without any.
func CallerKey(r *http.Request) string {
	c, _ := FromContext(r.Context())
	return httpx.CallerKey(r, c.Issuer, c.Tenant, c.Subject)
}

// GuardOf returns the Guard of a route's handler as chi.Walk reports it.
func GuardOf(h http.Handler) (*Guard, bool) {
	g, ok := h.(*Guard)
	return g, ok
}

// Check walks every route of r and refuses a route registered without
// Allow or Public (OpenPaths excepted), and a tenant-scoped role on a route
// without {tenantId} unless the route is AllowAnyTenant's. A service checks
// its router at start.
func Check(r chi.Routes) error {
	var problems []string
	err := chi.Walk(r, func(method, pattern string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		if slices.Contains(OpenPaths, pattern) {
			return nil
		}
		g, ok := GuardOf(h)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s %s declares no roles", method, pattern))
			return nil
		}
		for _, role := range g.roles {
			if TenantScoped(role) && !g.anyTenant && !strings.Contains(pattern, "{tenantId}") {
				problems = append(problems, fmt.Sprintf("%s %s: tenant-scoped role %s on a route without {tenantId}", method, pattern, role))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return errors.New("routes without access declarations: " + strings.Join(problems, "; "))
	}
	return nil
}
