package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/authtest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func server(t *testing.T, pool *pgxpool.Pool) *httptest.Server {
	t.Helper()
	r := chi.NewRouter()
	r.Use(authtest.SignedIn("viewer@acme.example", "viewer"))
	httpapi.New(app.New(app.Deps{Pool: pool}, app.Config{}), slog.New(slog.DiscardHandler)).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, queryapi.YAML(), r))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

func TestGetSummary(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	price := f.Price("api_calls", "USD", "0.01")
	u1, u2 := f.Usage("api_calls", "USD", "1.5"), f.Usage("compute_seconds", "KRW", "10")
	c1, c2 := f.Charge(u1, "2026-11", "0.01"), f.Charge(u2, "2026-11", "2.5")
	adj := f.Adjustment("2026-11", "USD", "-0.005")
	inv, _ := f.Invoice("2026-11", "USD", "0.01", "0.01")
	Decide(t, pool, ib, price, u1, u2, c1, c2, adj, inv)
	srv := server(t, pool)

	status, ct, body := get(t, srv, "/v1/tenants/acme/summary")
	if status != 200 || ct != "application/json" {
		t.Fatalf("summary: %d %s %s", status, ct, body)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"tenantId": "acme",
		"usage":    map[string]any{"count": 2.0, "quantityByMeter": map[string]any{"api_calls": "1.5", "compute_seconds": "10"}},
		"charged":  map[string]any{"USD": "0.015", "KRW": "25"},
		"adjusted": map[string]any{"USD": "-0.005"},
		"invoiced": map[string]any{"USD": "0.01"},
		// The latest occurredAt: the invoice, built last.
		"lastEventAt": inv.Envelope.OccurredAt.Format("2006-01-02T15:04:05Z07:00"),
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if string(wantJSON) != string(gotJSON) {
		t.Fatalf("summary\n got %s\nwant %s", gotJSON, wantJSON)
	}

	status, _, body = get(t, srv, "/v1/tenants/nobody/summary")
	if status != 200 || !strings.Contains(body, `"usage":{"count":0,"quantityByMeter":{}}`) ||
		!strings.Contains(body, `"charged":{},"adjusted":{},"invoiced":{},"lastEventAt":null`) {
		t.Fatalf("unknown tenant: %d %s, want 200 with zeros", status, body)
	}

	for _, tt := range []struct{ name, path string }{
		{"space", "/v1/tenants/a%20b/summary"},
		{"dot", "/v1/tenants/a.b/summary"},
		{"too long", "/v1/tenants/" + strings.Repeat("x", 129) + "/summary"},
		{"unicode", "/v1/tenants/%C3%A9/summary"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, ct, body := get(t, srv, tt.path)
			if status != 400 || ct != "application/problem+json" || !strings.Contains(body, `"code":"invalid_tenant_id"`) {
				t.Fatalf("%s: %d %s %s, want 400 invalid_tenant_id", tt.path, status, ct, body)
			}
		})
	}
}

func TestDatabaseDownIs503(t *testing.T) {
	// Nothing listens on port 1: every connection attempt fails.
	pool, err := pgxpool.New(t.Context(), "postgres://query@127.0.0.1:1/query?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	status, _, body := get(t, server(t, pool), "/v1/tenants/acme/summary")
	if status != 503 || !strings.Contains(body, `"code":"database_unavailable"`) {
		t.Fatalf("database down: %d %s, want 503 database_unavailable", status, body)
	}
}
