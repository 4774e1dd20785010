package query_test

import (
	"context"
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
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/pkg/service"
)

type route struct{ method, pattern string }

// routesOf builds a service's HTTP handler as service.Run does (its own
// routes, the internal operator endpoints, the open endpoints, behind the
// access policy) and lists every route.
func routesOf(t *testing.T, spec service.Spec) (*httptest.Server, []route, *pgxpool.Pool) {
	t.Helper()
	dbURL := pgtest.NewDB(t, templates[spec.Name])
	cfg, err := service.LoadConfig(service.NewEnvFrom(map[string]string{"DATABASE_URL": dbURL, "AUTH_DEV_KEY": "true"}), spec.Name, spec.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := envelope.NewRegistry()
	events.Register(reg)
	d := service.Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Pool: pool, Metrics: prometheus.NewRegistry(), Registry: reg}
	parts, err := spec.Build(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	r := service.NewRouter(d, prometheus.NewRegistry(), parts)
	var routes []route
	if err := chi.Walk(r, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, route{method, pattern})
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

// Every route of every service refuses a missing, forged or expired
// credential with 401, and a credential of the wrong role or another tenant
// with 403, with a problem and nothing else; only /healthz, /readyz and
// /metrics are open. The same routes with the right credential get past the
// policy (to whatever the handler answers).
func TestAccessControlAllRoutes(t *testing.T) {
	forger := auth.Key{ID: auth.DevKey.ID, Secret: []byte("not-the-development-key-but-32-bytes!")}
	stranger := auth.Key{ID: "prod", Secret: auth.DevKey.Secret}
	expired := auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour))
	var (
		opToken      = token(t, auth.DevKey, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour))
		acmeToken    = token(t, auth.DevKey, auth.NewClaims("bob", auth.RoleTenant, "acme", time.Hour))
		otherToken   = token(t, auth.DevKey, auth.NewClaims("eve", auth.RoleTenant, "other", time.Hour))
		serviceToken = token(t, auth.DevKey, auth.NewClaims("query", auth.RoleService, "", time.Hour))
		forgedToken  = token(t, forger, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour))
		strangeToken = token(t, stranger, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour))
		expiredToken = token(t, auth.DevKey, expired)
	)
	refusedAlways := []struct{ name, token string }{
		{"no token", ""}, {"bad signature", forgedToken}, {"unknown key", strangeToken}, {"expired", expiredToken},
		{"not a JWT", "Zm9vYmFy"},
	}
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			srv, routes, pool := routesOf(t, spec)
			send := func(method, p, tok string) (int, map[string]any) {
				t.Helper()
				req, err := http.NewRequest(method, srv.URL+p, strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				var body map[string]any
				_ = json.Unmarshal(b, &body)
				return resp.StatusCode, body
			}
			var open []string
			n := 0
			for _, rt := range routes {
				p := path(rt.pattern)
				rule, _ := auth.RuleFor(p)
				if rule == auth.Open {
					open = append(open, rt.pattern)
					continue
				}
				if rule == auth.Console {
					consoleRefuses(t, srv.URL, rt.method, rt.pattern, p, opToken, acmeToken)
					continue
				}
				n++
				cases := []struct {
					name, token string
					status      int
				}{}
				for _, c := range refusedAlways {
					cases = append(cases, struct {
						name, token string
						status      int
					}{c.name, c.token, 401})
				}
				add := func(name, tok string) {
					cases = append(cases, struct {
						name, token string
						status      int
					}{name, tok, 403})
				}
				var allowed []string
				switch rule {
				case auth.Tenant:
					add("other tenant", otherToken)
					add("service role", serviceToken)
					allowed = []string{acmeToken, opToken}
				case auth.Internal:
					add("tenant role", acmeToken)
					allowed = []string{serviceToken, opToken}
				default:
					add("tenant role", acmeToken)
					add("service role", serviceToken)
					allowed = []string{opToken}
				}
				for _, c := range cases {
					status, body := send(rt.method, p, c.token)
					want := map[int]string{401: "unauthorized", 403: "forbidden"}[c.status]
					if status != c.status || body["code"] != want {
						t.Errorf("%s %s, %s: %d %v, want %d %s", rt.method, rt.pattern, c.name, status, body, c.status, want)
					}
					for k := range body {
						if !slices.Contains([]string{"type", "title", "status", "detail", "code"}, k) {
							t.Errorf("%s %s, %s: answer carries %q: %v", rt.method, rt.pattern, c.name, k, body)
						}
					}
				}
				var written int
				if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_event`).Scan(&written); err != nil || written != 0 {
					t.Errorf("%s %s: %d outbox rows after refused calls (%v)", rt.method, rt.pattern, written, err)
				}
				for _, tok := range allowed {
					if status, body := send(rt.method, p, tok); status == 401 || status == 403 {
						t.Errorf("%s %s with an allowed credential: %d %v", rt.method, rt.pattern, status, body)
					}
				}
			}
			slices.Sort(open)
			open = slices.Compact(open) // /metrics answers every method
			if !slices.Equal(open, []string{"/healthz", "/metrics", "/readyz"}) {
				t.Errorf("open routes %v, want only /healthz, /metrics, /readyz", open)
			}
			if n < 5 {
				t.Errorf("only %d guarded routes: %v", n, routes)
			}
			t.Logf("%d guarded routes checked", n)
		})
	}
}

// consoleRefuses checks a route of the operator console (auth.Console): its
// credential is its own session cookie, so without one every page but the
// sign-in form redirects to that form, whatever bearer header is sent
// (console tests cover the session itself).
func consoleRefuses(t *testing.T, base, method, pattern, p string, tokens ...string) {
	t.Helper()
	if strings.HasSuffix(pattern, "/sign-in") {
		return // the way in
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tok := range append([]string{""}, tokens...) {
		req, err := http.NewRequest(method, base+p, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/sign-in" {
			t.Errorf("%s %s without a console session: %d %s, want a redirect to the sign-in form",
				method, pattern, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}
