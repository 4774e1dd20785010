package system_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/testkit/servicetest"
)

type route struct {
	method, pattern string
	handler         http.Handler
}

// routesOf builds a service's HTTP handler as service.Run does (its own
// routes, the internal operator endpoints, the open endpoints, behind the
// access policy) and lists every route.
func routesOf(t *testing.T, spec service.Spec) (*httptest.Server, []route, *pgxpool.Pool) {
	t.Helper()
	dbURL := servicetest.NewDB(t, spec)
	// The services query calls are nowhere (an address nothing listens on),
	// not at their default ports, where something else may answer.
	nowhere := "http://" + servicetest.FreeAddr(t)
	urls := "meter=" + nowhere + ",usage=" + nowhere + ",billing=" + nowhere + ",invoice=" + nowhere
	cfg, err := service.LoadConfig(service.NewEnvFrom(map[string]string{
		"DATABASE_URL": dbURL, "AUTH_DEV_KEY": "true", "SERVICE_URLS": urls,
	}), spec.Name, spec.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := envelope.NewRegistry()
	events.Register(reg)
	d := service.Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Pool: pool, Metrics: prometheus.NewRegistry(), Registry: reg}
	parts, err := spec.Build(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	r := service.NewRouter(d, prometheus.NewRegistry(), parts)
	var routes []route
	if err := chi.Walk(r, func(method, pattern string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, route{method, pattern, h})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, routes, pool
}

var param = regexp.MustCompile(`\{[^}]+\}`)

// path fills a route pattern's parameters: tenant acme, a period, an id.
func path(pattern string) string {
	return param.ReplaceAllStringFunc(pattern, func(p string) string {
		switch p {
		case "{tenantId}":
			return "acme"
		case "{period}":
			return "2026-11"
		default:
			return uuid.NewString()
		}
	})
}

func token(t *testing.T, key auth.Key, c auth.Claims) string {
	t.Helper()
	s, err := auth.Token(key, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Admitted roles, by route, for every service: the expectation the route
// declarations (auth.Allow next to each route) must meet. A route a service
// serves that is missing here, or here and served by none, fails the test.
var (
	ingest   = []string{auth.RoleIngest}
	reader   = []string{auth.RoleViewer, auth.RoleBillingAdmin}
	admin    = []string{auth.RoleBillingAdmin}
	operator = []string{auth.RoleOperator}
	internal = []string{auth.RoleService}
	public   = []string{}
	catalog  = []string{auth.RoleCatalogAdmin}
	// catalogReaders read the meter catalog, the tenant roles of any tenant.
	catalogReaders = []string{auth.RoleCatalogAdmin, auth.RoleOperator, auth.RoleService, auth.RoleViewer, auth.RoleBillingAdmin, auth.RoleIngest}
	// eventSenders send CloudEvents: ingest for its tenant (the handler
	// checks each event's subject), platform-ingest for any.
	eventSenders = []string{auth.RoleIngest, auth.RolePlatformIngest}
	wantRoles    = map[string][]string{
		// meter
		"POST /v1/tenants/{tenantId}/prices": admin,
		"GET /v1/tenants/{tenantId}/prices":  reader,
		"POST /v1/meters":                    catalog,
		"GET /v1/meters":                     catalogReaders,
		"GET /v1/meters/{code}":              catalogReaders,
		"POST /v1/plans":                     catalog,
		"GET /v1/plans":                      catalogReaders,
		"GET /v1/plans/{code}/versions":      catalogReaders,
		// usage
		"POST /v1/events":                            eventSenders,
		"POST /api/v1/events":                        eventSenders,
		"POST /v1/tenants/{tenantId}/usage":          ingest,
		"POST /v1/tenants/{tenantId}/usage:batch":    ingest,
		"GET /v1/tenants/{tenantId}/usage/{usageId}": ingest,
		// billing
		"POST /v1/tenants/{tenantId}/adjustments":                        admin,
		"POST /v1/tenants/{tenantId}/periods/{period}/close":             admin,
		"GET /v1/tenants/{tenantId}/charges":                             reader,
		"GET /v1/tenants/{tenantId}/periods/{period}":                    reader,
		"PUT /v1/tenants/{tenantId}/settings":                            admin,
		"POST /v1/tenants/{tenantId}/subscriptions":                      admin,
		"POST /v1/tenants/{tenantId}/subscriptions/{subscriptionId}/end": admin,
		"GET /v1/tenants/{tenantId}/subscriptions":                       reader,
		"GET /internal/v1/tenants/{tenantId}/subscriptions":              internal,
		// invoice
		"GET /v1/tenants/{tenantId}/invoices":                          reader,
		"GET /v1/tenants/{tenantId}/invoices/{invoiceId}":              reader,
		"POST /v1/tenants/{tenantId}/credit-grants":                    admin,
		"GET /v1/tenants/{tenantId}/credit-grants":                     reader,
		"POST /v1/tenants/{tenantId}/alerts":                           admin,
		"GET /v1/tenants/{tenantId}/alerts":                            reader,
		"DELETE /v1/tenants/{tenantId}/alerts/{alertId}":               admin,
		"POST /v1/tenants/{tenantId}/webhook-endpoints":                admin,
		"GET /v1/tenants/{tenantId}/webhook-endpoints":                 admin,
		"DELETE /v1/tenants/{tenantId}/webhook-endpoints/{endpointId}": admin,
		"GET /internal/v1/webhook-intents":                             internal,
		"GET /internal/v1/webhook-intents/stats":                       internal,
		"GET /internal/v1/webhook-intents/{intentId}":                  internal,
		"POST /internal/v1/webhook-intents/{intentId}/retry":           internal,
		"GET /internal/v1/tenants/{tenantId}/credit-grants":            internal,
		// query
		"GET /v1/tenants/{tenantId}/summary":                         reader,
		"GET /v1/tenants/{tenantId}/meters/{meterCode}/usage":        reader,
		"GET /v1/tenants/{tenantId}/periods/{period}/charge-facts":   reader,
		"GET /v1/tenants/{tenantId}/periods/{period}/reconciliation": reader,
		"GET /v1/tenants/{tenantId}/late-usage":                      reader,
		"GET /v1/operator/recovery":                                  operator,
		"GET /v1/operator/quarantine":                                operator,
		"POST /v1/operator/redrives":                                 operator,
		"GET /v1/operator/redrives/{redriveId}":                      operator,
		"GET /v1/operator/dead-letters":                              operator,
		"POST /v1/operator/dead-letters/release":                     operator,
		"GET /v1/operator/reconciliation":                            operator,
		"GET /v1/operator/webhook-intents":                           operator,
		"GET /v1/operator/webhook-intents/stats":                     operator,
		"POST /v1/operator/webhook-intents/{intentId}/retry":         operator,
		"GET /console/sign-in":                                       public,
		"POST /console/sign-in":                                      public,
		"GET /console/":                                              operator,
		"POST /console/sign-out":                                     operator,
		"GET /console/quarantine":                                    operator,
		"POST /console/redrives":                                     operator,
		"GET /console/redrives/{redriveId}":                          operator,
		"GET /console/dead-letters":                                  operator,
		"POST /console/dead-letters/release":                         operator,
		"GET /console/reconciliation":                                operator,
		"GET /console/tenants":                                       operator,
		"GET /console/catalog":                                       operator,
		"GET /console/webhooks":                                      operator,
		"POST /console/webhooks/{intentId}/retry":                    operator,
		// every service (pkg/ops)
		"GET /internal/v1/recovery":             internal,
		"GET /internal/v1/quarantine":           internal,
		"GET /internal/v1/dead-letters":         internal,
		"GET /internal/v1/reconciliation/{set}": internal,
	}
	// anyTenant are the routes without {tenantId} that admit the tenant
	// roles of every tenant (auth.AllowAnyTenant).
	anyTenant = map[string]bool{"GET /v1/meters": true, "GET /v1/meters/{code}": true,
		"GET /v1/plans": true, "GET /v1/plans/{code}/versions": true, "POST /v1/events": true, "POST /api/v1/events": true}
)

// caller is one credential of the route x role x tenant table: a role, on
// the path's own tenant (acme) or another's.
type caller struct {
	name, role, tenant, token string
}

// callers are every role, the tenant-scoped ones for tenant acme (the
// tenant of every path) and for another tenant.
func callers(t *testing.T) []caller {
	var out []caller
	for _, role := range auth.Roles {
		if role == auth.RoleService { // query, the one service that calls others
			out = append(out, caller{role, role, "", token(t, auth.DevServiceKey("query"), auth.NewClaims("query", role, "", time.Minute))})
			continue
		}
		if !auth.TenantScoped(role) {
			out = append(out, caller{role, role, "", token(t, auth.DevKey, auth.NewClaims("sub-"+role, role, "", time.Hour))})
			continue
		}
		for _, tenant := range []string{"acme", "other"} {
			out = append(out, caller{role + "@" + tenant, role, tenant, token(t, auth.DevKey, auth.NewClaims("sub-"+role, role, tenant, time.Hour))})
		}
	}
	return out
}

// Every route of every service, for every role on its own tenant and on
// another: the route admits exactly the roles wantRoles lists (a
// tenant-scoped role on its own tenant only), answering 403 forbidden to
// every other, and 401 to a missing, forged, unknown-key or expired
// credential, with a problem and nothing else, writing nothing; only
// /healthz, /readyz, /metrics and /openapi.json are open. A route served without an entry
// in wantRoles, or without declared roles, fails.
func TestAccessControlAllRoutes(t *testing.T) {
	forger, err := auth.GenerateKey(auth.DevKey.ID) // the development key's id, another key
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := auth.GenerateKey("prod")
	if err != nil {
		t.Fatal(err)
	}
	expired := auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour))
	tooLong := auth.NewClaims("alice", auth.RoleOperator, "", 2*time.Hour)
	elsewhere := auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)
	elsewhere.Audience = jwt.ClaimStrings{"elsewhere"}
	foreign := auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)
	foreign.Issuer = "https://issuer.example"
	hs256 := jwt.NewWithClaims(jwt.SigningMethodHS256, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour))
	hs256.Header["kid"] = auth.DevKey.ID
	hs256Token, err := hs256.SignedString([]byte(auth.DevKey.Public()))
	if err != nil {
		t.Fatal(err)
	}
	meter := auth.NewClaims("meter", auth.RoleService, "", time.Minute) // not an allowed caller
	refusedAlways := []struct{ name, token, code string }{
		{"no token", "", "unauthorized"},
		{"bad signature", token(t, forger, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)), "invalid_token"},
		{"unknown key", token(t, stranger, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)), "invalid_token"},
		{"expired", token(t, auth.DevKey, expired), "invalid_token"},
		{"lifetime too long", token(t, auth.DevKey, tooLong), "invalid_token"},
		{"wrong audience", token(t, auth.DevKey, elsewhere), "invalid_token"},
		{"wrong issuer", token(t, auth.DevKey, foreign), "invalid_token"},
		{"HS256", hs256Token, "invalid_token"},
		{"service not allowed", token(t, auth.DevServiceKey("meter"), meter), "invalid_token"},
		{"not a JWT", "Zm9vYmFy", "invalid_token"},
	}
	everyone := callers(t)
	served := map[string]bool{}
	ran := 0
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			ran++
			srv, routes, pool := routesOf(t, spec)
			send := func(method, p, tok string) (int, map[string]any, http.Header) {
				t.Helper()
				req, err := http.NewRequest(method, srv.URL+p, strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := noRedirect.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				var body map[string]any
				_ = json.Unmarshal(b, &body)
				return resp.StatusCode, body, resp.Header
			}
			problemOnly := func(what string, body map[string]any) {
				t.Helper()
				for k := range body {
					if !slices.Contains([]string{"type", "title", "status", "detail", "code"}, k) {
						t.Errorf("%s: answer carries %q: %v", what, k, body)
					}
				}
			}
			outbox := func() int {
				var n int
				if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			var open []string
			n := 0
			for _, rt := range routes {
				p := path(rt.pattern)
				if auth.RuleFor(p) == auth.Open {
					open = append(open, rt.pattern)
					continue
				}
				key := rt.method + " " + rt.pattern
				served[key] = true
				want, listed := wantRoles[key]
				if !listed {
					t.Errorf("%s: served but not in the access table", key)
					continue
				}
				g, guarded := auth.GuardOf(rt.handler)
				if !guarded {
					t.Errorf("%s: declares no roles (register it with auth.Allow)", key)
					continue
				}
				if got := g.Roles(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
					t.Errorf("%s: declares roles %v, want %v", key, got, want)
				}
				if len(want) == 0 != g.IsPublic() {
					t.Errorf("%s: public %v, want %v", key, g.IsPublic(), len(want) == 0)
				}
				if auth.RuleFor(p) == auth.Console {
					// The console's credential is its session cookie (its
					// own tests cover it); a bearer never opens a page.
					if len(want) > 0 {
						consoleRefuses(t, srv.URL, rt.method, rt.pattern, p, everyone)
					}
					continue
				}
				n++
				before := outbox()
				for _, c := range refusedAlways {
					status, body, _ := send(rt.method, p, c.token)
					if status != 401 || body["code"] != c.code {
						t.Errorf("%s, %s: %d %v, want 401 %s", key, c.name, status, body, c.code)
					}
					problemOnly(key+", "+c.name, body)
				}
				var admitted []caller
				for _, c := range everyone {
					if slices.Contains(want, c.role) && (!auth.TenantScoped(c.role) || c.tenant == "acme" || anyTenant[key]) {
						admitted = append(admitted, c)
						continue
					}
					status, body, _ := send(rt.method, p, c.token)
					if status != 403 || body["code"] != "forbidden" {
						t.Errorf("%s as %s: %d %v, want 403 forbidden", key, c.name, status, body)
					}
					problemOnly(key+" as "+c.name, body)
				}
				if after := outbox(); after != before {
					t.Errorf("%s: %d outbox rows written by refused calls", key, after-before)
				}
				for _, c := range admitted {
					if status, body, _ := send(rt.method, p, c.token); status == 401 || status == 403 {
						t.Errorf("%s as %s (admitted): %d %v", key, c.name, status, body)
					}
				}
			}
			slices.Sort(open)
			open = slices.Compact(open) // /metrics answers every method
			if !slices.Equal(open, []string{"/healthz", "/metrics", "/openapi.json", "/readyz"}) {
				t.Errorf("open routes %v, want only /healthz, /metrics, /openapi.json, /readyz", open)
			}
			if n < 5 {
				t.Errorf("only %d guarded routes: %v", n, routes)
			}
			t.Logf("%d guarded routes x %d credentials checked", n, len(everyone)+len(refusedAlways))
		})
	}
	for key := range wantRoles {
		if ran == len(specs) && !served[key] {
			t.Errorf("%s: in the access table but served by no service", key)
		}
	}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// consoleRefuses checks a route of the operator console (auth.Console): its
// credential is its own session cookie, so without one every page
// redirects to the sign-in form, whatever bearer header is sent.
func consoleRefuses(t *testing.T, base, method, pattern, p string, callers []caller) {
	t.Helper()
	for _, c := range append([]caller{{name: "no token"}}, callers...) {
		req, err := http.NewRequest(method, base+p, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/sign-in" {
			t.Errorf("%s %s with bearer %s and no console session: %d %s, want a redirect to the sign-in form",
				method, pattern, c.name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}
