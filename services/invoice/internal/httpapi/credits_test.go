package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/authtest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// Credit grants over HTTP: every refused grant is a problem with its code
// and writes nothing; a grant is idempotent by key; past the limit of live
// grants one more is 422 limit_exceeded; the list shows each grant's
// balance and status.
func TestCreditGrantsOverHTTP(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	var now atomic.Pointer[time.Time]
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	now.Store(&start)
	r := chi.NewRouter()
	r.Use(authtest.SignedIn("admin@acme.example", "billing-admin"))
	httpapi.New(app.New(app.Deps{Pool: pool, Clock: func() time.Time { return *now.Load() }}, app.Config{MaxGrants: 2}),
		seller, slog.New(slog.DiscardHandler)).CreditRoutes(r)
	srv := httptest.NewServer(apitest.Handler(t, invoiceapi.YAML(), r))
	t.Cleanup(srv.Close)
	post := func(key, body string) (int, map[string]any, http.Header) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/tenants/acme/credit-grants", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("body %q: %v", raw, err)
		}
		return resp.StatusCode, v, resp.Header
	}
	rows := func() int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM credit_grant) + (SELECT count(*) FROM idempotency_key)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"no key", "", `{"currency":"USD","amount":"500","reason":"prepaid"}`, 400, "missing_idempotency_key"},
		{"no currency", "k", `{"amount":"500","reason":"prepaid"}`, 400, "missing_field"},
		{"no reason", "k", `{"currency":"USD","amount":"500"}`, 400, "missing_field"},
		{"unknown currency", "k", `{"currency":"usd","amount":"500","reason":"prepaid"}`, 400, "unknown_currency"},
		{"not invoiceable", "k", `{"currency":"XAU","amount":"500","reason":"prepaid"}`, 422, "currency_not_invoiceable"},
		{"zero", "k", `{"currency":"USD","amount":"0","reason":"prepaid"}`, 400, "invalid_amount"},
		{"negative", "k", `{"currency":"USD","amount":"-5","reason":"prepaid"}`, 400, "invalid_amount"},
		{"exponent", "k", `{"currency":"USD","amount":"5e2","reason":"prepaid"}`, 400, "invalid_amount"},
		{"fraction of a cent", "k", `{"currency":"USD","amount":"5.001","reason":"prepaid"}`, 422, "amount_precision"},
		{"fraction of a won", "k", `{"currency":"KRW","amount":"5.5","reason":"prepaid"}`, 422, "amount_precision"},
		{"19 digits", "k", `{"currency":"USD","amount":"1000000000000000000","reason":"prepaid"}`, 400, "decimal_out_of_range"},
		{"expired already", "k", `{"currency":"USD","amount":"5","reason":"prepaid","expiresAt":"2026-11-01T00:00:00Z"}`, 422, "invalid_expiry"},
		{"expiry before start", "k", `{"currency":"USD","amount":"5","reason":"prepaid","effectiveAt":"2026-12-01T00:00:00Z","expiresAt":"2026-11-30T00:00:00Z"}`, 422, "invalid_expiry"},
		{"priority", "k", `{"currency":"USD","amount":"5","reason":"prepaid","priority":1001}`, 400, "invalid_priority"},
		{"bad time", "k", `{"currency":"USD","amount":"5","reason":"prepaid","effectiveAt":"tomorrow"}`, 400, "invalid_field"},
		{"control character", "k", `{"currency":"USD","amount":"5","reason":"pre\u0007paid"}`, 400, "control_character"},
		{"unknown field", "k", `{"currency":"USD","amount":"5","reason":"prepaid","balance":"9"}`, 400, "unknown_field"},
	} {
		if status, v, _ := post(tc.key, tc.body); status != tc.status || v["code"] != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, status, v, tc.status, tc.code)
		}
	}
	if n := rows(); n != 0 {
		t.Fatalf("refused grants wrote %d rows", n)
	}
	body := `{"currency":"USD","amount":"500","reason":"prepaid","expiresAt":"2027-11-01T00:00:00Z","priority":2}`
	status, first, _ := post("g1", body)
	if status != http.StatusCreated || first["balance"] != "500" || first["status"] != "active" || first["priority"] != 2.0 ||
		first["actor"] != "admin@acme.example" {
		t.Fatalf("grant: %d %v", status, first)
	}
	if status, again, h := post("g1", body); status != http.StatusCreated || again["grantId"] != first["grantId"] ||
		h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v", status, again)
	}
	// A retry after the grant expired replays its answer: the checks that
	// depend on now are made for a request not answered yet.
	later := time.Date(2027, 12, 1, 0, 0, 0, 0, time.UTC)
	now.Store(&later)
	if status, again, h := post("g1", body); status != http.StatusCreated || again["grantId"] != first["grantId"] ||
		h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after the expiry: %d %v", status, again)
	}
	now.Store(&start)
	if status, v, _ := post("g1", `{"currency":"USD","amount":"501","reason":"prepaid"}`); status != 422 || v["code"] != "idempotency_key_reused" {
		t.Fatalf("key reused: %d %v", status, v)
	}
	if status, v, _ := post("g2", `{"currency":"KRW","amount":"10000","reason":"from March","effectiveAt":"2027-03-01T00:00:00Z"}`); status != 201 ||
		v["status"] != "pending" {
		t.Fatalf("a later grant: %d %v", status, v)
	}
	before := rows()
	if status, v, _ := post("g3", `{"currency":"USD","amount":"5","reason":"one more"}`); status != 422 || v["code"] != "limit_exceeded" {
		t.Fatalf("a third live grant: %d %v, want 422 limit_exceeded", status, v)
	}
	if n := rows(); n != before {
		t.Fatalf("a refused grant wrote %d rows", n-before)
	}
	code, _, list := get(t, srv, "/v1/tenants/acme/credit-grants?limit=1")
	grants, _ := list["grants"].([]any)
	if code != http.StatusOK || len(grants) != 1 || list["next"] == nil {
		t.Fatalf("first page: %d %v", code, list)
	}
	code, _, list = get(t, srv, "/v1/tenants/acme/credit-grants?limit=1&cursor="+list["next"].(string))
	grants, _ = list["grants"].([]any)
	if code != http.StatusOK || len(grants) != 1 || grants[0].(map[string]any)["currency"] != "KRW" || list["next"] != nil {
		t.Fatalf("last page: %d %v", code, list)
	}
}
