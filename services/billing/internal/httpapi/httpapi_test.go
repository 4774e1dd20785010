package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/httpapi"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/authtest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testActor is the subject of the token the tests' requests carry.
const testActor = "admin@t1.example"

// signedIn stands for auth.Middleware: it puts the claims of a verified
// billing-admin token of testActor in each request's context, but for a
// request with header X-No-Token.
var signedIn = authtest.SignedIn(testActor, auth.RoleBillingAdmin)

var jan10 = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)

type fixture struct {
	pool *pgxpool.Pool
	srv  *httptest.Server
	// charges of tenant t1 (USD) and t2 (USD) in 2026-01.
	charge, otherCharge string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, app.Config{})
}

func newFixtureWith(t *testing.T, cfg app.Config) *fixture {
	t.Helper()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, cfg)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	r := chi.NewRouter()
	r.Use(signedIn)
	httpapi.New(svc, nil).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, billingapi.YAML(), r))
	t.Cleanup(srv.Close)
	f := &fixture{pool: pool, srv: srv}
	var raws [][]byte
	for _, tenant := range []string{"t1", "t2"} {
		raws = append(raws,
			bt.Price{Tenant: tenant, Meter: "api_calls", Currency: "USD", Version: 1, UnitPrice: "0.5", EffectiveAt: jan10.AddDate(0, 0, -9)}.Raw(t),
			bt.Usage{Tenant: tenant, Meter: "api_calls", Currency: "USD", PriceVersion: 1, Quantity: "3", OccurredAt: jan10}.Raw(t))
	}
	bt.Decide(t, pool, ib, raws...)
	f.charge = f.chargeOf(t, "t1")
	f.otherCharge = f.chargeOf(t, "t2")
	return f
}

func (f *fixture) chargeOf(t *testing.T, tenant string) string {
	t.Helper()
	var id string
	if err := f.pool.QueryRow(t.Context(), `SELECT charge_id::text FROM charge WHERE tenant_id = $1`, tenant).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) problem(t *testing.T) (code string) {
	t.Helper()
	var p struct {
		Type, Title, Detail, Code string
		Status                    int
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q for %d %s", ct, r.status, r.body)
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != r.status || p.Type == "" || p.Title == "" {
		t.Fatalf("not a problem: %d %s", r.status, r.body)
	}
	return p.Code
}

func (f *fixture) do(t *testing.T, method, path string, header map[string]string, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// state is everything a rejected request must leave untouched.
func (f *fixture) state(t *testing.T) string {
	t.Helper()
	var s string
	err := f.pool.QueryRow(t.Context(), `SELECT concat_ws(' ',
		(SELECT count(*) FROM adjustment), (SELECT count(*) FROM charge), (SELECT count(*) FROM outbox_event),
		(SELECT count(*) FROM idempotency_key), (SELECT count(*) FROM billing_period),
		(SELECT string_agg(tenant_id || period || status, ',' ORDER BY tenant_id, period) FROM billing_period))`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func adjustmentBody(correctionOf, amount, currency, reason string) string {
	return fmt.Sprintf(`{"correctionOf":%q,"amount":%q,"currency":%q,"reason":%q}`, correctionOf, amount, currency, reason)
}

func TestBadRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	future := events.Period(time.Now().AddDate(0, 2, 0))
	// A key already used, for idempotency_key_reused.
	if r := f.do(t, "POST", "/v1/tenants/t1/adjustments", map[string]string{"Idempotency-Key": "used"},
		adjustmentBody(f.charge, "-1", "USD", "first")); r.status != 201 {
		t.Fatalf("setup adjustment: %d %s", r.status, r.body)
	}
	if r := f.do(t, "POST", "/v1/tenants/t1/periods/2025-01/close", map[string]string{"Idempotency-Key": "used-close"}, ""); r.status != 202 {
		t.Fatalf("setup close: %d %s", r.status, r.body)
	}
	key := map[string]string{"Idempotency-Key": "k-1"}
	good := adjustmentBody(f.charge, "-1.25", "USD", "refund")
	adj := "/v1/tenants/t1/adjustments"
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		body               string
		contentType        string
		status             int
		code               string
	}{
		// POST adjustments
		{"invalid tenant", "POST", "/v1/tenants/t.1/adjustments", key, good, "", 400, "invalid_tenant_id"},
		{"tenant too long", "POST", "/v1/tenants/" + strings.Repeat("t", 129) + "/adjustments", key, good, "", 400, "invalid_tenant_id"},
		{"missing idempotency key", "POST", adj, nil, good, "", 400, "missing_idempotency_key"},
		{"invalid idempotency key", "POST", adj, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, good, "", 400, "invalid_idempotency_key"},
		{"correlation id with a space", "POST", adj, map[string]string{"Idempotency-Key": "k-1", "X-Correlation-Id": "ticket 42"}, good, "", 400, "invalid_correlation_id"},
		{"correlation id too long", "POST", adj, map[string]string{"Idempotency-Key": "k-1", "X-Correlation-Id": strings.Repeat("c", 129)}, good, "", 400, "invalid_correlation_id"},
		{"malformed json", "POST", adj, key, `{"correctionOf":`, "", 400, "malformed_json"},
		{"empty body", "POST", adj, key, ``, "", 400, "malformed_json"},
		{"not an object", "POST", adj, key, `["x"]`, "", 400, "malformed_json"},
		{"trailing data", "POST", adj, key, good + `{}`, "", 400, "malformed_json"},
		{"unknown field", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":"1","currency":"USD","reason":"r","tax":"1"}`, "", 400, "unknown_field"},
		{"missing correctionOf", "POST", adj, key, `{"amount":"1","currency":"USD","reason":"r"}`, "", 400, "missing_field"},
		{"missing amount", "POST", adj, key, `{"correctionOf":"` + f.charge + `","currency":"USD","reason":"r"}`, "", 400, "missing_field"},
		{"null amount", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":null,"currency":"USD","reason":"r"}`, "", 400, "missing_field"},
		{"missing currency", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":"1","reason":"r"}`, "", 400, "missing_field"},
		{"missing reason", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":"1","currency":"USD"}`, "", 400, "missing_field"},
		{"amount as a number", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":12.5,"currency":"USD","reason":"r"}`, "", 400, "invalid_amount"},
		{"amount as an object", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":{},"currency":"USD","reason":"r"}`, "", 400, "invalid_amount"},
		{"amount with exponent", "POST", adj, key, adjustmentBody(f.charge, "1e2", "USD", "r"), "", 400, "invalid_amount"},
		{"amount not a number", "POST", adj, key, adjustmentBody(f.charge, "ten", "USD", "r"), "", 400, "invalid_amount"},
		{"zero amount", "POST", adj, key, adjustmentBody(f.charge, "0.00", "USD", "r"), "", 400, "invalid_amount"},
		{"unknown currency", "POST", adj, key, adjustmentBody(f.charge, "1", "ABC", "r"), "", 400, "unknown_currency"},
		{"lower-case currency", "POST", adj, key, adjustmentBody(f.charge, "1", "usd", "r"), "", 400, "unknown_currency"},
		{"reason too long", "POST", adj, key, adjustmentBody(f.charge, "1", "USD", strings.Repeat("r", 501)), "", 400, "invalid_field"},
		{"correctionOf not a uuid", "POST", adj, key, adjustmentBody("c-1", "1", "USD", "r"), "", 400, "invalid_field"},
		{"correctionOf a number", "POST", adj, key, `{"correctionOf":1,"amount":"1","currency":"USD","reason":"r"}`, "", 400, "invalid_field"},
		{"body too large", "POST", adj, key, adjustmentBody(f.charge, "1", "USD", strings.Repeat("r", 20000)), "", 413, "body_too_large"},
		{"not json", "POST", adj, key, good, "text/plain", 415, "unsupported_media_type"},
		{"charset utf-16", "POST", adj, key, good, "application/json; charset=utf-16", 415, "unsupported_media_type"},
		{"null body", "POST", adj, key, `null`, "", 400, "malformed_json"},
		{"amount of 19 integer digits", "POST", adj, key, adjustmentBody(f.charge, "1"+strings.Repeat("0", 18), "USD", "r"), "", 400, "decimal_out_of_range"},
		{"amount of 38 nines", "POST", adj, key, adjustmentBody(f.charge, strings.Repeat("9", 38), "USD", "r"), "", 400, "decimal_out_of_range"},
		{"reason with BEL", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":"-0.25","currency":"USD","reason":"refund\u0007"}`, "", 400, "control_character"},
		{"reason with ESC", "POST", adj, key, `{"correctionOf":"` + f.charge + `","amount":"-0.25","currency":"USD","reason":"\u001b[31mrefund"}`, "", 400, "control_character"},
		{"unknown charge", "POST", adj, key, adjustmentBody("01a22984-85a2-755b-a3ef-a289f2b96b22", "1", "USD", "r"), "", 404, "charge_not_found"},
		{"another tenant's charge", "POST", adj, key, adjustmentBody(f.otherCharge, "1", "USD", "r"), "", 404, "charge_not_found"},
		{"currency mismatch", "POST", adj, key, adjustmentBody(f.charge, "1", "EUR", "r"), "", 422, "currency_mismatch"},
		{"key reused", "POST", adj, map[string]string{"Idempotency-Key": "used"}, adjustmentBody(f.charge, "-2", "USD", "first"), "", 422, "idempotency_key_reused"},
		{"amount finer than the minor unit", "POST", adj, key, adjustmentBody(f.charge, "-0.005", "USD", "r"), "", 422, "amount_precision"},
		{"a precious metal", "POST", adj, key, adjustmentBody(f.charge, "1", "XAU", "r"), "", 422, "currency_not_invoiceable"},
		{"the testing code", "POST", adj, key, adjustmentBody(f.charge, "1", "XTS", "r"), "", 422, "currency_not_invoiceable"},
		// The charge is 1.50 USD, the setup credited 1: 0.50 is left.
		{"credit beyond the charges", "POST", adj, key, adjustmentBody(f.charge, "-0.51", "USD", "r"), "", 422, "credit_exceeds_charges"},
		{"no token", "POST", adj, map[string]string{"Idempotency-Key": "k-1", "X-No-Token": "1"}, good, "", 401, "unauthorized"},
		// POST close
		{"close: invalid tenant", "POST", "/v1/tenants/t%201/periods/2026-01/close", key, "", "", 400, "invalid_tenant_id"},
		{"close: missing key", "POST", "/v1/tenants/t1/periods/2026-01/close", nil, "", "", 400, "missing_idempotency_key"},
		{"close: correlation id not ASCII", "POST", "/v1/tenants/t1/periods/2026-01/close", map[string]string{"Idempotency-Key": "k-1", "X-Correlation-Id": "caf\u00e9"}, "", "", 400, "invalid_correlation_id"},
		{"close: month 13", "POST", "/v1/tenants/t1/periods/2026-13/close", key, "", "", 400, "invalid_period"},
		{"close: short month", "POST", "/v1/tenants/t1/periods/2026-1/close", key, "", "", 400, "invalid_period"},
		{"close: a date", "POST", "/v1/tenants/t1/periods/2026-01-31/close", key, "", "", 400, "invalid_period"},
		{"close: words", "POST", "/v1/tenants/t1/periods/january/close", key, "", "", 400, "invalid_period"},
		{"close: future", "POST", "/v1/tenants/t1/periods/" + future + "/close", key, "", "", 422, "period_in_future"},
		{"close: no token", "POST", "/v1/tenants/t1/periods/2026-01/close", map[string]string{"Idempotency-Key": "k-1", "X-No-Token": "1"}, "", "", 401, "unauthorized"},
		{"close: key reused", "POST", "/v1/tenants/t1/periods/2026-01/close", map[string]string{"Idempotency-Key": "used-close"}, "", "", 422, "idempotency_key_reused"},
		// GET charges
		{"charges: no period", "GET", "/v1/tenants/t1/charges", nil, "", "", 400, "invalid_period"},
		{"charges: bad period", "GET", "/v1/tenants/t1/charges?period=2026-00", nil, "", "", 400, "invalid_period"},
		{"charges: invalid tenant", "GET", "/v1/tenants/t$1/charges?period=2026-01", nil, "", "", 400, "invalid_tenant_id"},
		{"charges: limit 0", "GET", "/v1/tenants/t1/charges?period=2026-01&limit=0", nil, "", "", 400, "invalid_limit"},
		{"charges: limit over 1000", "GET", "/v1/tenants/t1/charges?period=2026-01&limit=1001", nil, "", "", 400, "invalid_limit"},
		{"charges: limit not a number", "GET", "/v1/tenants/t1/charges?period=2026-01&limit=ten", nil, "", "", 400, "invalid_limit"},
		{"charges: negative limit", "GET", "/v1/tenants/t1/charges?period=2026-01&limit=-1", nil, "", "", 400, "invalid_limit"},
		{"charges: cursor not base64", "GET", "/v1/tenants/t1/charges?period=2026-01&cursor=%25%25", nil, "", "", 400, "invalid_cursor"},
		{"charges: cursor not json", "GET", "/v1/tenants/t1/charges?period=2026-01&cursor=bm90IGpzb24", nil, "", "", 400, "invalid_cursor"},
		{"charges: cursor of another shape", "GET", "/v1/tenants/t1/charges?period=2026-01&cursor=WzEsMl0", nil, "", "", 400, "invalid_cursor"},
		{"charges: cursor with a bad charge id", "GET", "/v1/tenants/t1/charges?period=2026-01&cursor=eyJpZCI6IngifQ", nil, "", "", 400, "invalid_cursor"},
		{"charges: cursor too long", "GET", "/v1/tenants/t1/charges?period=2026-01&cursor=" + strings.Repeat("e", 2000), nil, "", "", 400, "invalid_cursor"},
		{"charges: cursor of another meter's list", "GET", "/v1/tenants/t1/charges?period=2026-01&meterCode=api_calls&cursor=eyJtIjoic21zIiwiYyI6IlVTRCIsInYiOjEsImlkIjoiMDAwMDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDAxIn0", nil, "", "", 400, "invalid_cursor"},
		{"charges: priceVersion 0", "GET", "/v1/tenants/t1/charges?period=2026-01&meterCode=api_calls&priceVersion=0", nil, "", "", 400, "invalid_price_version"},
		{"charges: negative priceVersion", "GET", "/v1/tenants/t1/charges?period=2026-01&meterCode=api_calls&priceVersion=-2", nil, "", "", 400, "invalid_price_version"},
		{"charges: priceVersion not a number", "GET", "/v1/tenants/t1/charges?period=2026-01&meterCode=api_calls&priceVersion=v1", nil, "", "", 400, "invalid_price_version"},
		{"charges: priceVersion without meterCode", "GET", "/v1/tenants/t1/charges?period=2026-01&priceVersion=1", nil, "", "", 400, "invalid_price_version"},
		{"charges: meterCode of 1,000 characters", "GET", "/v1/tenants/t1/charges?period=2026-01&meterCode=" + strings.Repeat("m", 1000), nil, "", "", 400, "invalid_meter_code"},
		{"charges: meterCode no meter could have", "GET", "/v1/tenants/t1/charges?period=2026-01&meterCode=a%20b", nil, "", "", 400, "invalid_meter_code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.state(t)
			h := map[string]string{}
			for k, v := range tc.header {
				h[k] = v
			}
			if tc.contentType != "" {
				h["Content-Type"] = tc.contentType
			}
			r := f.do(t, tc.method, tc.path, h, tc.body)
			if r.status != tc.status {
				t.Fatalf("status = %d, want %d: %s", r.status, tc.status, r.body)
			}
			if code := r.problem(t); code != tc.code {
				t.Fatalf("code = %q, want %q: %s", code, tc.code, r.body)
			}
			if after := f.state(t); after != before {
				t.Fatalf("a rejected request wrote: %s -> %s", before, after)
			}
		})
	}
}

func TestAdjustmentOverHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	body := adjustmentBody(f.charge, "-0.75", "USD", "SLA credit")
	h := map[string]string{"Idempotency-Key": "adj-1", "X-Correlation-Id": "ticket-42"}

	// Eight identical requests at once: one adjustment, one answer.
	const n = 8
	responses := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { responses[i] = f.do(t, "POST", "/v1/tenants/t1/adjustments", h, body) })
	}
	wg.Wait()
	first := ""
	replayed := 0
	for _, r := range responses {
		if r.status != http.StatusCreated {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		if first == "" {
			first = string(r.body)
		}
		if string(r.body) != first {
			t.Fatalf("answers differ: %s vs %s", first, r.body)
		}
		if r.header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Fatalf("%d replays, want %d", replayed, n-1)
	}
	var got struct {
		AdjustmentID, EventID, Period string
	}
	if err := json.Unmarshal([]byte(first), &got); err != nil || got.AdjustmentID == "" || got.EventID == "" || got.Period != "2026-01" {
		t.Fatalf("body %s", first)
	}
	if c := bt.Count(t, f.pool, `SELECT count(*) FROM adjustment`); c != 1 {
		t.Fatalf("adjustments = %d", c)
	}
	// Reordered keys and whitespace are the same request.
	same := fmt.Sprintf(`{ "reason":"SLA credit", "currency":"USD", "amount":"-0.75", "correctionOf":%q }`, f.charge)
	if r := f.do(t, "POST", "/v1/tenants/t1/adjustments", h, same); r.status != 201 || string(r.body) != first ||
		r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s %v", r.status, r.body, r.header)
	}
	out := bt.Outbox(t, f.pool)
	last := out[len(out)-1]
	if last.Envelope.EventType != events.TypeAdjustmentPosted || last.Envelope.EventID.String() != got.EventID ||
		last.Envelope.CorrelationID != "ticket-42" {
		t.Fatalf("published %+v", last.Envelope)
	}
	// The token's subject is the actor, in the event and in the row.
	if p := last.Payload.(events.AdjustmentPosted); p.Actor != testActor {
		t.Fatalf("AdjustmentPosted actor = %q, want %q", p.Actor, testActor)
	}
	if c := bt.Count(t, f.pool, `SELECT count(*) FROM adjustment WHERE actor = $1`, testActor); c != 1 {
		t.Fatalf("adjustments of %s = %d, want 1", testActor, c)
	}
}

// One tenant's period holds at most BILLING_MAX_ADJUSTMENTS adjustments,
// posted before or after its close: one more is 422 limit_exceeded and
// writes nothing, whatever its amount; another tenant's period is not
// counted against it. Every sum of a period's adjustments is bounded by it.
func TestAdjustmentsPastTheLimit(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, app.Config{MaxAdjustments: 3})
	post := func(tenant, charge, key, amount string) response {
		return f.do(t, "POST", "/v1/tenants/"+tenant+"/adjustments", map[string]string{"Idempotency-Key": key},
			adjustmentBody(charge, amount, "USD", "correction"))
	}
	for i := range 2 {
		if r := post("t1", f.charge, fmt.Sprint("a", i), "0.25"); r.status != http.StatusCreated {
			t.Fatalf("adjustment %d: %d %s", i, r.status, r.body)
		}
	}
	if r := f.do(t, "POST", "/v1/tenants/t1/periods/2026-01/close", map[string]string{"Idempotency-Key": "close"}, ""); r.status != http.StatusAccepted ||
		!strings.Contains(string(r.body), `"status":"closed"`) {
		t.Fatalf("close: %d %s", r.status, r.body)
	}
	// After the close it still counts: the third is the last that fits.
	if r := post("t1", f.charge, "a2", "-0.25"); r.status != http.StatusCreated {
		t.Fatalf("third adjustment, after the close: %d %s", r.status, r.body)
	}
	before := f.state(t)
	for _, amount := range []string{"0.25", "-0.01"} {
		r := post("t1", f.charge, "over-"+amount, amount)
		if r.status != http.StatusUnprocessableEntity || r.problem(t) != "limit_exceeded" {
			t.Fatalf("a fourth adjustment of %s: %d %s, want 422 limit_exceeded", amount, r.status, r.body)
		}
	}
	if after := f.state(t); after != before {
		t.Fatalf("refused adjustments wrote: %s before, %s after", before, after)
	}
	if r := post("t2", f.otherCharge, "t2-a0", "0.25"); r.status != http.StatusCreated {
		t.Fatalf("another tenant's period: %d %s", r.status, r.body)
	}
	// The setting lowered under what the period holds, as for a period
	// adjusted before the limit existed: it takes no more, so what its sums
	// read can no longer grow.
	r := chi.NewRouter()
	r.Use(signedIn)
	httpapi.New(app.New(app.Deps{Pool: f.pool}, app.Config{MaxAdjustments: 2}), nil).Routes(r)
	f.srv = httptest.NewServer(apitest.Handler(t, billingapi.YAML(), r))
	t.Cleanup(f.srv.Close)
	before = f.state(t)
	if r := post("t1", f.charge, "lowered", "-0.01"); r.status != http.StatusUnprocessableEntity || r.problem(t) != "limit_exceeded" {
		t.Fatalf("an adjustment of a period holding more than the lowered limit: %d %s, want 422 limit_exceeded", r.status, r.body)
	}
	if after := f.state(t); after != before {
		t.Fatalf("the refused adjustment wrote: %s before, %s after", before, after)
	}
}

func TestCloseAndChargesOverHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := map[string]string{"Idempotency-Key": "close-1"}
	r := f.do(t, "POST", "/v1/tenants/t1/periods/2026-01/close", h, "")
	if r.status != http.StatusAccepted || strings.TrimSpace(string(r.body)) != `{"period":"2026-01","status":"closed"}` {
		t.Fatalf("close: %d %s", r.status, r.body)
	}
	r2 := f.do(t, "POST", "/v1/tenants/t1/periods/2026-01/close", h, "")
	if r2.status != http.StatusAccepted || string(r2.body) != string(r.body) || r2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s %v", r2.status, r2.body, r2.header)
	}
	r3 := f.do(t, "POST", "/v1/tenants/t1/periods/2026-01/close", map[string]string{"Idempotency-Key": "close-2"}, "")
	if r3.status != http.StatusAccepted || string(r3.body) != string(r.body) {
		t.Fatalf("close again: %d %s", r3.status, r3.body)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, f.pool))
	if len(closes) != 1 || closes[0].Actor != testActor {
		t.Fatalf("closes published = %+v, want one by %s", closes, testActor)
	}
	if c := bt.Count(t, f.pool, `SELECT count(*) FROM billing_period WHERE closed_by = $1 AND status = 'closed'`, testActor); c != 1 {
		t.Fatalf("periods closed by %s = %d, want 1", testActor, c)
	}

	r = f.do(t, "GET", "/v1/tenants/t1/charges?period=2026-01", nil, "")
	if r.status != 200 {
		t.Fatalf("charges: %d %s", r.status, r.body)
	}
	var list struct {
		Charges []map[string]any `json:"charges"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Charges) != 1 {
		t.Fatalf("charges body %s", r.body)
	}
	c := list.Charges[0]
	for field, want := range map[string]any{
		"chargeId": f.charge, "meterCode": "api_calls", "currency": "USD", "quantity": "3", "unitPrice": "0.5",
		"priceVersion": float64(1), "amount": "1.5", "period": "2026-01", "late": false,
	} {
		if c[field] != want {
			t.Errorf("%s = %#v, want %#v", field, c[field], want)
		}
	}
	for _, field := range []string{"eventId", "usageEventId"} {
		if s, _ := c[field].(string); len(s) != 36 {
			t.Errorf("%s = %#v", field, c[field])
		}
	}
	r = f.do(t, "GET", "/v1/tenants/nobody/charges?period=2026-01", nil, "")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"charges":[]}` {
		t.Fatalf("empty list: %d %s", r.status, r.body)
	}
}

func TestDatabaseDownIs503(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r := chi.NewRouter()
	r.Use(signedIn)
	httpapi.New(app.New(app.Deps{Pool: pool}, app.Config{}), nil).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, billingapi.YAML(), r))
	t.Cleanup(srv.Close)
	f := &fixture{srv: srv}
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/tenants/t1/adjustments", adjustmentBody("01a22984-85a2-755b-a3ef-a289f2b96b22", "1", "USD", "r")},
		{"POST", "/v1/tenants/t1/periods/2026-01/close", ""},
		{"GET", "/v1/tenants/t1/charges?period=2026-01", ""},
	} {
		resp := f.do(t, req.method, req.path, map[string]string{"Idempotency-Key": "k"}, req.body)
		if resp.status != http.StatusServiceUnavailable || resp.problem(t) != "database_unavailable" {
			t.Errorf("%s %s: %d %s", req.method, req.path, resp.status, resp.body)
		}
	}
}

type chargesPage struct {
	Charges []struct {
		ChargeID     string `json:"chargeId"`
		MeterCode    string `json:"meterCode"`
		Currency     string `json:"currency"`
		PriceVersion int64  `json:"priceVersion"`
		Period       string `json:"period"`
	} `json:"charges"`
	Next *string `json:"next"`
}

// pages reads a charges list page by page and returns the charges as
// "meter/currency/version/id", in the order read, and the page sizes.
func (f *fixture) pages(t *testing.T, query string) (all []string, sizes []int) {
	t.Helper()
	cursor := ""
	for range 100 {
		path := "/v1/tenants/t1/charges?" + query
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := f.do(t, "GET", path, nil, "")
		var p chargesPage
		if r.status != 200 || json.Unmarshal(r.body, &p) != nil {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		for _, c := range p.Charges {
			if c.Period != "2026-01" {
				t.Fatalf("GET %s: a charge of %s", path, c.Period)
			}
			all = append(all, fmt.Sprintf("%s/%s/%d/%s", c.MeterCode, c.Currency, c.PriceVersion, c.ChargeID))
		}
		sizes = append(sizes, len(p.Charges))
		if p.Next == nil {
			if strings.Contains(string(r.body), `"next"`) {
				t.Fatalf("GET %s: the last page names next: %s", path, r.body)
			}
			return all, sizes
		}
		cursor = *p.Next
	}
	t.Fatalf("%s: more than 100 pages", query)
	return nil, nil
}

// chargesInDB returns t1's January charges matching where, as
// "meter/currency/version/id", in line order.
func (f *fixture) chargesInDB(t *testing.T, where string) []string {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), `SELECT meter_code || '/' || currency || '/' || price_version || '/' || charge_id
		FROM charge WHERE tenant_id = 't1' AND period = '2026-01' AND `+where+`
		ORDER BY meter_code, currency, price_version, charge_id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The charges list: pages in line order (meter, currency, price version,
// charge id) of at most limit charges, next absent on the last page; with
// meterCode and priceVersion exactly the charges of one invoice line.
func TestChargesListPagesInLineOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // t1 and t2: one api_calls USD v1 charge each in January
	svc := app.New(app.Deps{Pool: f.pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, f.pool, ib)
	jan15 := time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC)
	raws := [][]byte{
		bt.Price{Tenant: "t1", Meter: "api_calls", Currency: "USD", Version: 2, UnitPrice: "0.25", EffectiveAt: jan15}.Raw(t),
		bt.Price{Tenant: "t1", Meter: "sms", Currency: "KRW", Version: 1, UnitPrice: "13", EffectiveAt: jan10.AddDate(0, 0, -9)}.Raw(t),
	}
	usage := func(tenant, meter, currency string, version int64, at time.Time, n int) {
		for i := range n {
			raws = append(raws, bt.Usage{Tenant: tenant, Meter: meter, Currency: currency, PriceVersion: version,
				Quantity: fmt.Sprint(i + 1), OccurredAt: at}.Raw(t))
		}
	}
	usage("t1", "sms", "KRW", 1, jan10, 3)
	usage("t1", "api_calls", "USD", 2, jan15.Add(time.Hour), 4)
	usage("t1", "api_calls", "USD", 1, jan10, 4) // 5 with the fixture's
	usage("t1", "api_calls", "USD", 2, jan10.AddDate(0, 1, 0), 2)
	usage("t2", "api_calls", "USD", 1, jan10, 2)
	bt.Decide(t, f.pool, ib, raws...)

	want := f.chargesInDB(t, "true")
	if len(want) != 12 {
		t.Fatalf("t1 January charges = %d, want 12", len(want))
	}
	for _, tc := range []struct {
		name, query, where string
		sizes              string
	}{
		{"default limit", "period=2026-01", "true", "[12]"},
		{"limit 5", "period=2026-01&limit=5", "true", "[5 5 2]"},
		{"limit 1", "period=2026-01&limit=1", "true", "[1 1 1 1 1 1 1 1 1 1 1 1]"},
		{"limit as many as there are: one page, no next", "period=2026-01&limit=12", "true", "[12]"},
		{"limit one short", "period=2026-01&limit=11", "true", "[11 1]"},
		{"limit 1000", "period=2026-01&limit=1000", "true", "[12]"},
		{"one meter", "period=2026-01&meterCode=api_calls&limit=4", "meter_code = 'api_calls'", "[4 4 1]"},
		{"one line", "period=2026-01&meterCode=api_calls&priceVersion=2&limit=3",
			"meter_code = 'api_calls' AND price_version = 2", "[3 1]"},
		{"another line", "period=2026-01&meterCode=api_calls&priceVersion=1", "meter_code = 'api_calls' AND price_version = 1", "[5]"},
		{"sms", "period=2026-01&meterCode=sms&priceVersion=1&limit=2", "meter_code = 'sms' AND price_version = 1", "[2 1]"},
		{"no such line", "period=2026-01&meterCode=sms&priceVersion=2", "false", "[0]"},
		{"no such meter", "period=2026-01&meterCode=storage", "false", "[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, sizes := f.pages(t, tc.query)
			if fmt.Sprint(sizes) != tc.sizes {
				t.Errorf("page sizes = %v, want %s", sizes, tc.sizes)
			}
			if want := f.chargesInDB(t, tc.where); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("charges =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
