package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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

// Alerts over HTTP: every refused alert is a problem with its code and
// writes nothing; an alert is idempotent by key; past the limit of live
// alerts one more is 422 limit_exceeded, and a deleted one frees its
// place; the list pages the live alerts; a delete of an unknown or deleted
// alert is 404.
func TestAlertsOverHTTP(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	r := chi.NewRouter()
	r.Use(authtest.SignedIn("admin@acme.example", "billing-admin"))
	httpapi.New(app.New(app.Deps{Pool: pool, Clock: func() time.Time { return now }}, app.Config{MaxAlerts: 2}),
		seller, slog.New(slog.DiscardHandler)).AlertRoutes(r)
	srv := httptest.NewServer(apitest.Handler(t, invoiceapi.YAML(), r))
	t.Cleanup(srv.Close)
	call := func(method, path, key, body string) (int, map[string]any, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
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
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("body %q: %v", raw, err)
			}
		}
		return resp.StatusCode, v, resp.Header
	}
	post := func(key, body string) (int, map[string]any, http.Header) {
		t.Helper()
		return call(http.MethodPost, "/v1/tenants/acme/alerts", key, body)
	}
	rows := func() int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM invoice_alert) + (SELECT count(*) FROM idempotency_key)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	nines := `"` + string(bytes.Repeat([]byte("9"), 19)) + `"`
	for _, tc := range []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"no key", "", `{"kind":"usage","meterCode":"api_calls","threshold":"10"}`, 400, "missing_idempotency_key"},
		{"no kind", "k", `{"meterCode":"api_calls","threshold":"10"}`, 400, "missing_field"},
		{"unknown kind", "k", `{"kind":"budget","currency":"USD","threshold":"10"}`, 400, "invalid_kind"},
		{"no threshold", "k", `{"kind":"usage","meterCode":"api_calls"}`, 400, "missing_field"},
		{"usage without meter", "k", `{"kind":"usage","threshold":"10"}`, 400, "missing_field"},
		{"bad meter code", "k", `{"kind":"usage","meterCode":"api calls","threshold":"10"}`, 400, "invalid_meter_code"},
		{"usage with currency", "k", `{"kind":"usage","meterCode":"api_calls","currency":"USD","threshold":"10"}`, 400, "invalid_field"},
		{"spend without currency", "k", `{"kind":"spend","threshold":"10"}`, 400, "missing_field"},
		{"spend with meter", "k", `{"kind":"spend","currency":"USD","meterCode":"api_calls","threshold":"10"}`, 400, "invalid_field"},
		{"unknown currency", "k", `{"kind":"spend","currency":"usd","threshold":"10"}`, 400, "unknown_currency"},
		{"not invoiceable", "k", `{"kind":"spend","currency":"XAU","threshold":"10"}`, 422, "currency_not_invoiceable"},
		{"zero", "k", `{"kind":"usage","meterCode":"api_calls","threshold":"0"}`, 400, "invalid_threshold"},
		{"negative", "k", `{"kind":"spend","currency":"USD","threshold":"-5"}`, 400, "invalid_threshold"},
		{"exponent", "k", `{"kind":"usage","meterCode":"api_calls","threshold":"1e3"}`, 400, "invalid_threshold"},
		{"19 digits", "k", `{"kind":"usage","meterCode":"api_calls","threshold":` + nines + `}`, 400, "decimal_out_of_range"},
		{"13 places", "k", `{"kind":"usage","meterCode":"api_calls","threshold":"0.0000000000001"}`, 400, "too_many_decimal_places"},
		{"fraction of a cent", "k", `{"kind":"spend","currency":"USD","threshold":"10.001"}`, 422, "amount_precision"},
		{"unknown field", "k", `{"kind":"spend","currency":"USD","threshold":"10","name":"x"}`, 400, "unknown_field"},
	} {
		if status, v, _ := post(tc.key, tc.body); status != tc.status || v["code"] != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, status, v, tc.status, tc.code)
		}
	}
	if n := rows(); n != 0 {
		t.Fatalf("refused alerts wrote %d rows", n)
	}
	body := `{"kind":"usage","meterCode":"api_calls","threshold":"1000.5"}`
	status, first, _ := post("a1", body)
	if status != http.StatusCreated || first["threshold"] != "1000.5" || first["kind"] != "usage" || first["meterCode"] != "api_calls" ||
		first["actor"] != "admin@acme.example" || first["currency"] != nil {
		t.Fatalf("alert: %d %v", status, first)
	}
	if status, again, h := post("a1", body); status != http.StatusCreated || again["alertId"] != first["alertId"] ||
		h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v", status, again)
	}
	if status, v, _ := post("a1", `{"kind":"usage","meterCode":"api_calls","threshold":"2000"}`); status != 422 || v["code"] != "idempotency_key_reused" {
		t.Fatalf("key reused: %d %v", status, v)
	}
	if status, v, _ := post("a2", `{"kind":"spend","currency":"JPY","threshold":"50000"}`); status != 201 || v["currency"] != "JPY" {
		t.Fatalf("a spend alert: %d %v", status, v)
	}
	before := rows()
	if status, v, _ := post("a3", `{"kind":"spend","currency":"USD","threshold":"5"}`); status != 422 || v["code"] != "limit_exceeded" {
		t.Fatalf("a third live alert: %d %v, want 422 limit_exceeded", status, v)
	}
	if n := rows(); n != before {
		t.Fatalf("a refused alert wrote %d rows", n-before)
	}
	code, _, list := get(t, srv, "/v1/tenants/acme/alerts?limit=1")
	alerts, _ := list["alerts"].([]any)
	if code != http.StatusOK || len(alerts) != 1 || alerts[0].(map[string]any)["alertId"] != first["alertId"] || list["next"] == nil {
		t.Fatalf("first page: %d %v", code, list)
	}
	code, _, list = get(t, srv, "/v1/tenants/acme/alerts?limit=1&cursor="+list["next"].(string))
	alerts, _ = list["alerts"].([]any)
	if code != http.StatusOK || len(alerts) != 1 || alerts[0].(map[string]any)["currency"] != "JPY" || list["next"] != nil {
		t.Fatalf("last page: %d %v", code, list)
	}
	path := "/v1/tenants/acme/alerts/" + first["alertId"].(string)
	if status, v, _ := call(http.MethodDelete, "/v1/tenants/acme/alerts/not-an-id", "", ""); status != 400 || v["code"] != "invalid_alert_id" {
		t.Fatalf("delete of a bad id: %d %v", status, v)
	}
	if status, v, _ := call(http.MethodDelete, "/v1/tenants/other/alerts/"+first["alertId"].(string), "", ""); status != 404 || v["code"] != "not_found" {
		t.Fatalf("delete of another tenant's alert: %d %v", status, v)
	}
	if status, _, _ := call(http.MethodDelete, path, "", ""); status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
	if status, v, _ := call(http.MethodDelete, path, "", ""); status != 404 || v["code"] != "not_found" {
		t.Fatalf("delete again: %d %v", status, v)
	}
	if status, v, _ := post("a4", `{"kind":"spend","currency":"USD","threshold":"5"}`); status != 201 {
		t.Fatalf("an alert in the deleted one's place: %d %v", status, v)
	}
	code, _, list = get(t, srv, "/v1/tenants/acme/alerts")
	if alerts, _ = list["alerts"].([]any); code != http.StatusOK || len(alerts) != 2 {
		t.Fatalf("after the delete: %d %v", code, list)
	}
}
