package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func server(t *testing.T, pool *pgxpool.Pool) *httptest.Server {
	t.Helper()
	r := chi.NewRouter()
	httpapi.New(app.NewReader(pool), slog.New(slog.DiscardHandler)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, string, map[string]any) {
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
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET %s: body %q is not a JSON object: %v", path, body, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), v
}

func TestGetInvoices(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-10")
	c1, c2 := p.Charge("USD", "3", "0.335"), p.Charge("KRW", "1", "99.5")
	closed := p.Close()
	adj := p.Adjustment("USD", "-0.5")
	q := NewPeriod(t, "acme", "2026-11")
	c3 := q.Charge("USD", "2", "1.25")
	Decide(t, pool, ib, c1, c2, closed, adj, c3)
	srv := server(t, pool)

	status, _, body := get(t, srv, "/v1/tenants/acme/invoices?period=2026-10")
	if status != 200 {
		t.Fatalf("list: %d %v", status, body)
	}
	list := body["invoices"].([]any)
	if len(list) != 2 {
		t.Fatalf("list: %d invoices, want KRW and USD", len(list))
	}
	krw, usd := list[0].(map[string]any), list[1].(map[string]any)
	if krw["currency"] != "KRW" || krw["status"] != "issued" || krw["subtotal"] != "99.5" || krw["total"] != "100" || krw["issuedAt"] == nil {
		t.Fatalf("KRW invoice %v", krw)
	}
	if usd["currency"] != "USD" || usd["subtotal"] != "1.005" || usd["total"] != "1" {
		t.Fatalf("USD invoice %v", usd)
	}
	lines := usd["lines"].([]any)
	if len(lines) != 2 || lines[0].(map[string]any)["originEventId"] != c1.EventID.String() ||
		lines[0].(map[string]any)["kind"] != "charge" || lines[0].(map[string]any)["amount"] != "1.005" ||
		lines[1].(map[string]any)["kind"] != "rounding" || lines[1].(map[string]any)["amount"] != "-0.005" ||
		lines[1].(map[string]any)["originEventId"] != closed.EventID.String() {
		t.Fatalf("USD lines %v", lines)
	}
	corr := usd["corrections"].([]any)
	if len(corr) != 1 || corr[0].(map[string]any)["originEventId"] != adj.EventID.String() || corr[0].(map[string]any)["amount"] != "-0.5" ||
		corr[0].(map[string]any)["correctionId"] == "" || corr[0].(map[string]any)["issuedAt"] == nil {
		t.Fatalf("USD corrections %v", corr)
	}

	// Every period, the open one included.
	_, _, body = get(t, srv, "/v1/tenants/acme/invoices")
	all := body["invoices"].([]any)
	if len(all) != 3 {
		t.Fatalf("all periods: %d invoices, want 3", len(all))
	}
	open := all[2].(map[string]any)
	if open["period"] != "2026-11" || open["status"] != "open" || open["total"] != nil || open["issuedAt"] != nil ||
		open["subtotal"] != "2.5" || len(open["corrections"].([]any)) != 0 {
		t.Fatalf("open invoice %v", open)
	}

	// One invoice by id; the same id under another tenant is not found.
	id := usd["invoiceId"].(string)
	status, _, one := get(t, srv, "/v1/tenants/acme/invoices/"+id)
	if status != 200 || one["invoiceId"] != id || one["tenantId"] != "acme" || one["period"] != "2026-10" || one["total"] != "1" {
		t.Fatalf("get: %d %v", status, one)
	}
	// An empty list is an empty array, not null.
	status, _, body = get(t, srv, "/v1/tenants/nobody/invoices?period=2026-10")
	if status != 200 || body["invoices"] == nil || len(body["invoices"].([]any)) != 0 {
		t.Fatalf("unknown tenant: %d %v, want 200 and []", status, body)
	}

	for _, tt := range []struct {
		name, path string
		status     int
		code       string
	}{
		{"another tenant's invoice", "/v1/tenants/other/invoices/" + id, 404, "not_found"},
		{"unknown invoice", "/v1/tenants/acme/invoices/" + uuid.NewString(), 404, "not_found"},
		{"invoice id not a uuid", "/v1/tenants/acme/invoices/nope", 400, "invalid_invoice_id"},
		{"invalid tenant on get", "/v1/tenants/a%20b/invoices/" + id, 400, "invalid_tenant_id"},
		{"invalid tenant on list", "/v1/tenants/" + strings.Repeat("x", 129) + "/invoices", 400, "invalid_tenant_id"},
		{"tenant with a dot", "/v1/tenants/a.b/invoices", 400, "invalid_tenant_id"},
		{"period not a month", "/v1/tenants/acme/invoices?period=2026-13", 400, "invalid_period"},
		{"period with a day", "/v1/tenants/acme/invoices?period=2026-10-01", 400, "invalid_period"},
		{"period words", "/v1/tenants/acme/invoices?period=october", 400, "invalid_period"},
		{"period single digit month", "/v1/tenants/acme/invoices?period=2026-1", 400, "invalid_period"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, ct, body := get(t, srv, tt.path)
			if status != tt.status || body["code"] != tt.code || ct != "application/problem+json" {
				t.Fatalf("%s: %d %s %v, want %d %s problem", tt.path, status, ct, body, tt.status, tt.code)
			}
		})
	}
}

func TestDatabaseDownIs503(t *testing.T) {
	// Nothing listens on port 1: every connection attempt fails.
	pool, err := pgxpool.New(context.Background(), "postgres://invoice@127.0.0.1:1/invoice?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv := server(t, pool)
	status, _, body := get(t, srv, "/v1/tenants/acme/invoices")
	if status != 503 || body["code"] != "database_unavailable" {
		t.Fatalf("with the pool closed: %d %v, want 503 database_unavailable", status, body)
	}
}
