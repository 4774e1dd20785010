package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/httpapi"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/authtest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testActor is the subject of the token the tests' requests carry.
const testActor = "admin@t1.example"

// asRole is the header that picks the role of a request's token (default
// billing-admin).
const asRole = "X-Test-Role"

// signedIn stands for auth.Middleware: it puts the claims of a verified
// token of testActor in each request's context, of the role named by
// header asRole (billing-admin without it; tenant-scoped roles for the
// path's tenant), but for a request with header X-No-Token.
func signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role := r.Header.Get(asRole)
		if role == "" {
			role = auth.RoleBillingAdmin
		}
		authtest.SignedIn(testActor, role)(next).ServeHTTP(w, r)
	})
}

var tmpl = servicetest.Template(meter.Spec)

type env struct {
	srv  *httptest.Server
	pool *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := pgtest.NewPool(t, tmpl)
	return &env{srv: serve(t, pool), pool: pool}
}

func serve(t *testing.T, pool *pgxpool.Pool) *httptest.Server {
	return serveWith(t, pool, app.Config{})
}

// serveWith serves the API of an App with cfg.
func serveWith(t *testing.T, pool *pgxpool.Pool, cfg app.Config) *httptest.Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	r := chi.NewRouter()
	r.Use(signedIn)
	httpapi.New(app.New(app.Deps{Pool: pool, Logger: log}, cfg), log).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, meterapi.YAML(), r))
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request; key is the Idempotency-Key ("" sends none).
func do(t *testing.T, srv *httptest.Server, method, path, key, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// written counts every row a command could have written.
func written(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return count(t, pool, `SELECT (SELECT count(*) FROM price) + (SELECT count(*) FROM price_series)
		+ (SELECT count(*) FROM outbox_event) + (SELECT count(*) FROM idempotency_key) + (SELECT count(*) FROM meter)
		+ (SELECT count(*) FROM plan) + (SELECT count(*) FROM plan_version)`)
}
