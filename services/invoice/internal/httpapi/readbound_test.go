package httpapi_test

import (
	"log/slog"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/authtest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// One read of invoices answers at most MaxReadLines lines and correction
// notes (a request's cost must not grow with a tenant's adjustments and
// price dimensions). Over it, a page or an invoice is
// refused 422 too_many_lines; a smaller page reads what fits, and a page's
// look-ahead invoice (the one read only to tell whether there is a next
// page) does not count.
func TestInvoiceReadsAnswerAtMostMaxReadLines(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	// KRW: one charge line. USD: three charge lines and two adjustments,
	// five lines, over the bound of 4.
	Decide(t, pool, ib, p.Charge("KRW", "1", "10"),
		p.ChargeOf("USD", "api_calls", 1, "1", "1"), p.ChargeOf("USD", "storage_gb", 1, "1", "1"),
		p.ChargeOf("USD", "messages", 1, "1", "1"), p.Adjustment("USD", "-0.5"), p.Adjustment("USD", "-0.25"))
	r := chi.NewRouter()
	r.Use(authtest.SignedIn("viewer@acme.example", "viewer"))
	httpapi.New(app.New(app.Deps{Pool: pool}, app.Config{MaxReadLines: 4}), seller, slog.New(slog.DiscardHandler)).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, invoiceapi.YAML(), r))
	t.Cleanup(srv.Close)

	tooMany := func(path string) {
		t.Helper()
		status, ct, body := get(t, srv, path)
		if status != 422 || body["code"] != "too_many_lines" || ct != "application/problem+json" {
			t.Fatalf("GET %s: %d %s %v, want 422 too_many_lines", path, status, ct, body)
		}
	}
	tooMany("/v1/tenants/acme/invoices")
	tooMany("/v1/tenants/acme/invoices?period=2026-11&limit=2")

	status, _, body := get(t, srv, "/v1/tenants/acme/invoices?limit=1")
	invs, _ := body["invoices"].([]any)
	next, _ := body["next"].(string)
	if status != 200 || len(invs) != 1 || next == "" {
		t.Fatalf("limit 1: %d %v, want the KRW invoice and a next", status, body)
	}
	krw := invs[0].(map[string]any)
	if krw["currency"] != "KRW" || len(krw["lines"].([]any)) != 1 {
		t.Fatalf("limit 1: %v, want the KRW invoice with its line", krw)
	}
	tooMany("/v1/tenants/acme/invoices?limit=1&cursor=" + url.QueryEscape(next))

	if status, _, body := get(t, srv, "/v1/tenants/acme/invoices/"+krw["invoiceId"].(string)); status != 200 {
		t.Fatalf("GET the KRW invoice: %d %v", status, body)
	}
	var usd uuid.UUID
	if err := pool.QueryRow(t.Context(), `SELECT invoice_id FROM invoice WHERE tenant_id = 'acme' AND currency = 'USD'`).Scan(&usd); err != nil {
		t.Fatal(err)
	}
	tooMany("/v1/tenants/acme/invoices/" + usd.String())
}
