package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/meter/internal/app"
)

type price struct {
	PriceID     uuid.UUID `json:"priceId"`
	TenantID    string    `json:"tenantId"`
	MeterCode   string    `json:"meterCode"`
	Currency    string    `json:"currency"`
	UnitPrice   string    `json:"unitPrice"`
	EffectiveAt time.Time `json:"effectiveAt"`
	Version     int64     `json:"version"`
	EventID     uuid.UUID `json:"eventId"`
	ActivatedAt time.Time `json:"activatedAt"`
}

func decodePrice(t *testing.T, body string) price {
	t.Helper()
	var p price
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return p
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// outboxEvents decodes the outbox rows of the price events, in append
// order (the MeterDefined of implied meters aside: allEvents).
func outboxEvents(t *testing.T, pool *pgxpool.Pool) []*envelope.Decoded {
	t.Helper()
	var out []*envelope.Decoded
	for _, d := range allEvents(t, pool) {
		if d.Envelope.EventType != events.TypeMeterDefined {
			out = append(out, d)
		}
	}
	return out
}

// allEvents decodes every outbox row, in append order.
func allEvents(t *testing.T, pool *pgxpool.Pool) []*envelope.Decoded {
	t.Helper()
	reg := envelope.NewRegistry()
	events.Register(reg)
	rows, err := pool.Query(t.Context(), `SELECT topic, envelope FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*envelope.Decoded
	for rows.Next() {
		var topic string
		var raw []byte
		if err := rows.Scan(&topic, &raw); err != nil {
			t.Fatal(err)
		}
		if topic != events.TopicMeter {
			t.Fatalf("topic = %s", topic)
		}
		d, err := reg.Decode(raw)
		if err != nil {
			t.Fatalf("decode outbox envelope: %v", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestActivatePrice(t *testing.T) {
	e := newEnv(t)
	effective := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	body := fmt.Sprintf(`{"meterCode":"api_calls","currency":"USD","unitPrice":"0.0025","effectiveAt":%q}`, rfc(effective))
	r := do(t, e.srv, "POST", "/v1/tenants/t1/prices", "k1", body)
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("first response marked as replayed")
	}
	p := decodePrice(t, r.body)
	if p.TenantID != "t1" || p.MeterCode != "api_calls" || p.Currency != "USD" || p.UnitPrice != "0.0025" ||
		!p.EffectiveAt.Equal(effective) || p.Version != 1 || p.PriceID == uuid.Nil || p.EventID == uuid.Nil {
		t.Fatalf("unexpected price %+v", p)
	}

	evs := outboxEvents(t, e.pool)
	if len(evs) != 1 {
		t.Fatalf("%d outbox events, want 1", len(evs))
	}
	env := evs[0].Envelope
	pa := evs[0].Payload.(events.PriceActivated)
	if env.EventID != p.EventID || env.EventType != events.TypePriceActivated || env.TenantID != "t1" ||
		env.AggregateType != events.AggregatePrice || env.AggregateID != events.PriceSeriesID("api_calls", "USD") ||
		env.AggregateVersion != 1 || env.Producer != "meter" {
		t.Fatalf("unexpected envelope %+v", env)
	}
	if pa.PriceID != p.PriceID || pa.Version != 1 || !pa.EffectiveAt.Equal(effective) || pa.UnitPrice.String() != "0.0025" {
		t.Fatalf("unexpected payload %+v", pa)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM price WHERE event_id = $1`, p.EventID); n != 1 {
		t.Fatalf("price rows with the event id: %d", n)
	}
	// The token's subject is the actor, in the event and in the row.
	if pa.Actor != testActor {
		t.Fatalf("PriceActivated actor %q, want %q", pa.Actor, testActor)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM price WHERE event_id = $1 AND actor = $2`, p.EventID, testActor); n != 1 {
		t.Fatalf("price rows of actor %s: %d", testActor, n)
	}
	// Price versions are immutable.
	for _, sql := range []string{`UPDATE price SET unit_price = 9`, `DELETE FROM price`} {
		if _, err := e.pool.Exec(t.Context(), sql); err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Fatalf("%s: err = %v, want refused as immutable", sql, err)
		}
	}

	// Without effectiveAt the price applies from its activation, or right
	// after the schedule its tenant's shard has published (here: by the
	// first activation, the lead ahead), a new series as an old one.
	before := time.Now().UTC()
	r = do(t, e.srv, "POST", "/v1/tenants/t1/prices", "k2", `{"meterCode":"api_calls","currency":"KRW","unitPrice":"3"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	p = decodePrice(t, r.body)
	if p.EffectiveAt.Before(p.ActivatedAt) || p.EffectiveAt.After(p.ActivatedAt.Add(app.DefaultScheduleLead+time.Microsecond)) ||
		p.ActivatedAt.Before(before.Truncate(time.Microsecond)) || p.Version != 1 {
		t.Fatalf("default effectiveAt: %+v", p)
	}
}

func TestActivatePriceReplay(t *testing.T) {
	e := newEnv(t)
	body := `{"meterCode":"m","currency":"USD","unitPrice":"1.50"}`
	first := do(t, e.srv, "POST", "/v1/tenants/t1/prices", "key-1", body)
	if first.status != http.StatusCreated {
		t.Fatalf("status %d: %s", first.status, first.body)
	}
	// The same request again, also with other whitespace and key order.
	for _, b := range []string{body, `{ "unitPrice": "1.50", "currency": "USD", "meterCode": "m" }`} {
		r := do(t, e.srv, "POST", "/v1/tenants/t1/prices", "key-1", b)
		if r.status != http.StatusCreated || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %q replayed=%q, want the first response", r.status, r.body, r.header.Get("Idempotent-Replayed"))
		}
	}
	// The same key with another request is refused, and changes nothing.
	r := do(t, e.srv, "POST", "/v1/tenants/t1/prices", "key-1", `{"meterCode":"m","currency":"USD","unitPrice":"2"}`)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"code":"idempotency_key_reused"`) {
		t.Fatalf("reused key: %d %s", r.status, r.body)
	}
	// The same key under another tenant is another command.
	r = do(t, e.srv, "POST", "/v1/tenants/t2/prices", "key-1", body)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("other tenant: %d %s", r.status, r.body)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM price`); n != 2 {
		t.Fatalf("%d price rows, want 2", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM outbox_event WHERE event_type = 'PriceActivated'`); n != 2 {
		t.Fatalf("%d outbox rows, want 2", n)
	}
}

func TestActivatePriceConcurrentIdentical(t *testing.T) {
	e := newEnv(t)
	const n = 8
	body := `{"meterCode":"m","currency":"USD","unitPrice":"1"}`
	results := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = do(t, e.srv, "POST", "/v1/tenants/t1/prices", "same", body) })
	}
	wg.Wait()
	fresh := 0
	for _, r := range results {
		if r.status != http.StatusCreated || r.body != results[0].body {
			t.Fatalf("got %d %s, want 201 and one body for all", r.status, r.body)
		}
		if r.header.Get("Idempotent-Replayed") == "" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d first responses, want 1", fresh)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM price`); c != 1 {
		t.Fatalf("%d price rows, want 1", c)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM outbox_event WHERE event_type = 'PriceActivated'`); c != 1 {
		t.Fatalf("%d outbox rows, want 1", c)
	}
}

func TestVersionsGapFreeUnderConcurrentActivations(t *testing.T) {
	e := newEnv(t)
	const n = 12
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"meterCode":"m","currency":"EUR","unitPrice":"%d"}`, i+1)
			statuses[i] = do(t, e.srv, "POST", "/v1/tenants/t1/prices", fmt.Sprintf("k%d", i), body).status
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusCreated {
			t.Fatalf("request %d: status %d", i, s)
		}
	}
	r := do(t, e.srv, "GET", "/v1/tenants/t1/prices?meterCode=m", "", "")
	var list struct{ Prices []price }
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Prices) != n {
		t.Fatalf("%d prices, want %d", len(list.Prices), n)
	}
	for i, p := range list.Prices {
		if p.Version != int64(i+1) {
			t.Fatalf("versions not gap-free: position %d has version %d", i, p.Version)
		}
		if i > 0 && p.EffectiveAt.Before(list.Prices[i-1].EffectiveAt) {
			t.Fatalf("version %d takes effect before version %d", p.Version, p.Version-1)
		}
	}
	// The events leave the outbox in version order (appended under the
	// series lock).
	evs := outboxEvents(t, e.pool)
	versions := make([]int64, len(evs))
	for i, d := range evs {
		versions[i] = d.Envelope.AggregateVersion
	}
	if !sort.SliceIsSorted(versions, func(a, b int) bool { return versions[a] < versions[b] }) || len(versions) != n {
		t.Fatalf("outbox versions %v, want 1..%d in order", versions, n)
	}
}

func TestScheduleRules(t *testing.T) {
	e := newEnv(t)
	post := func(key, effectiveAt string) response {
		return do(t, e.srv, "POST", "/v1/tenants/t1/prices", key,
			fmt.Sprintf(`{"meterCode":"m","currency":"USD","unitPrice":"1","effectiveAt":%q}`, effectiveAt))
	}
	r := post("past", rfc(time.Now().Add(-time.Minute)))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"code":"price_backdated"`) {
		t.Fatalf("backdated: %d %s", r.status, r.body)
	}
	if n := written(t, e.pool); n != 0 {
		t.Fatalf("a refused activation wrote %d rows", n)
	}

	later := time.Now().Add(2 * time.Hour)
	if r := post("v1", rfc(later)); r.status != http.StatusCreated {
		t.Fatalf("v1: %d %s", r.status, r.body)
	}
	before := written(t, e.pool)
	r = post("v2", rfc(later.Add(-time.Hour)))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"code":"price_out_of_order"`) {
		t.Fatalf("out of order: %d %s", r.status, r.body)
	}
	if n := written(t, e.pool); n != before {
		t.Fatalf("a refused activation wrote %d rows", n-before)
	}
	// A refused request keeps no receipt: the key can be used again.
	if r := post("v2", rfc(later.Add(time.Hour))); r.status != http.StatusCreated || decodePrice(t, r.body).Version != 2 {
		t.Fatalf("v2 after refusal: %d %s", r.status, r.body)
	}
	// A replay later still returns the first response, even though its
	// effectiveAt may have passed by then.
	if r := post("v1", rfc(later)); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of v1: %d %s", r.status, r.body)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 256)
	tests := []struct {
		name, tenant, key, body string
		status                  int
		code                    string
	}{
		{"missing idempotency key", "t1", "", `{"meterCode":"m","currency":"USD","unitPrice":"1"}`, 400, "missing_idempotency_key"},
		{"invalid idempotency key", "t1", long, `{"meterCode":"m","currency":"USD","unitPrice":"1"}`, 400, "invalid_idempotency_key"},
		{"invalid tenant", "t%7C1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1"}`, 400, "invalid_tenant_id"},
		{"malformed json", "t1", "k", `{"meterCode":`, 400, "malformed_json"},
		{"not an object", "t1", "k", `[1]`, 400, "malformed_json"},
		{"trailing data", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1"} {}`, 400, "malformed_json"},
		{"empty body", "t1", "k", ``, 400, "malformed_json"},
		{"unknown field", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1","discount":"5"}`, 400, "unknown_field"},
		{"missing meterCode", "t1", "k", `{"currency":"USD","unitPrice":"1"}`, 400, "missing_field"},
		{"missing currency", "t1", "k", `{"meterCode":"m","unitPrice":"1"}`, 400, "missing_field"},
		{"missing unitPrice", "t1", "k", `{"meterCode":"m","currency":"USD"}`, 400, "missing_field"},
		{"null unitPrice", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":null}`, 400, "missing_field"},
		{"invalid meter code", "t1", "k", `{"meterCode":"api calls","currency":"USD","unitPrice":"1"}`, 400, "invalid_meter_code"},
		{"meter code too long", "t1", "k", `{"meterCode":"` + strings.Repeat("m", 65) + `","currency":"USD","unitPrice":"1"}`, 400, "invalid_meter_code"},
		{"meterCode not a string", "t1", "k", `{"meterCode":7,"currency":"USD","unitPrice":"1"}`, 400, "invalid_field"},
		{"negative price", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"-0.01"}`, 400, "invalid_price"},
		{"price with exponent", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1e2"}`, 400, "invalid_price"},
		{"price not a number", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"one"}`, 400, "invalid_price"},
		{"price as JSON number", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":1.5}`, 400, "invalid_price"},
		{"price too many digits", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"` + strings.Repeat("9", 39) + `"}`, 400, "invalid_price"},
		{"price of 38 nines", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"` + strings.Repeat("9", 38) + `"}`, 400, "decimal_out_of_range"},
		{"price of 19 integer digits", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1` + strings.Repeat("0", 18) + `"}`, 400, "decimal_out_of_range"},
		{"package size of 38 nines", "t1", "k", `{"meterCode":"m","currency":"USD","model":"package","packageSize":"` + strings.Repeat("9", 38) + `","packagePrice":"1"}`, 400, "decimal_out_of_range"},
		{"unknown currency", "t1", "k", `{"meterCode":"m","currency":"ABC","unitPrice":"1"}`, 400, "unknown_currency"},
		{"lower-case currency", "t1", "k", `{"meterCode":"m","currency":"usd","unitPrice":"1"}`, 400, "unknown_currency"},
		{"withdrawn currency", "t1", "k", `{"meterCode":"m","currency":"HRK","unitPrice":"1"}`, 400, "unknown_currency"},
		{"gold", "t1", "k", `{"meterCode":"m","currency":"XAU","unitPrice":"1"}`, 422, "currency_not_invoiceable"},
		{"no currency", "t1", "k", `{"meterCode":"m","currency":"XXX","unitPrice":"1"}`, 422, "currency_not_invoiceable"},
		{"a fund code", "t1", "k", `{"meterCode":"m","currency":"CLF","unitPrice":"1"}`, 422, "currency_not_invoiceable"},
		{"invalid effectiveAt", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1","effectiveAt":"next monday"}`, 400, "invalid_field"},
		{"body too large", "t1", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1","effectiveAt":"` + strings.Repeat(" ", 20<<10) + `"}`, 413, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, e.srv, "POST", "/v1/tenants/"+tt.tenant+"/prices", tt.key, tt.body)
			if r.status != tt.status || !strings.Contains(r.body, `"code":"`+tt.code+`"`) {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("content type %q", ct)
			}
			if n := written(t, e.pool); n != 0 {
				t.Fatalf("bad input wrote %d rows", n)
			}
		})
	}
	r := do(t, e.srv, "GET", "/v1/tenants/t1/prices?meterCode=a%20b", "", "")
	if r.status != 400 || !strings.Contains(r.body, `"code":"invalid_meter_code"`) {
		t.Fatalf("list with bad meterCode: %d %s", r.status, r.body)
	}
	r = do(t, e.srv, "GET", "/v1/tenants/t%20/prices", "", "")
	if r.status != 400 || !strings.Contains(r.body, `"code":"invalid_tenant_id"`) {
		t.Fatalf("list with bad tenant: %d %s", r.status, r.body)
	}
}

func TestListPrices(t *testing.T) {
	e := newEnv(t)
	later := time.Now().Add(time.Hour)
	for i, p := range []struct{ tenant, meter, currency string }{
		{"t1", "zeta", "USD"}, {"t1", "alpha", "USD"}, {"t1", "alpha", "EUR"}, {"t1", "alpha", "EUR"}, {"t2", "alpha", "USD"},
	} {
		body := fmt.Sprintf(`{"meterCode":%q,"currency":%q,"unitPrice":"1.%d","effectiveAt":%q}`, p.meter, p.currency, i, rfc(later))
		if r := do(t, e.srv, "POST", "/v1/tenants/"+p.tenant+"/prices", fmt.Sprint(i), body); r.status != 201 {
			t.Fatalf("activate: %d %s", r.status, r.body)
		}
	}
	list := func(query string) []string {
		r := do(t, e.srv, "GET", "/v1/tenants/t1/prices"+query, "", "")
		if r.status != 200 {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		var l struct{ Prices []price }
		if err := json.Unmarshal([]byte(r.body), &l); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range l.Prices {
			out = append(out, fmt.Sprintf("%s/%s/%d/%s", p.MeterCode, p.Currency, p.Version, p.UnitPrice))
		}
		return out
	}
	if got, want := fmt.Sprint(list("")), "[alpha/EUR/1/1.2 alpha/EUR/2/1.3 alpha/USD/1/1.1 zeta/USD/1/1]"; got != want {
		t.Fatalf("list = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(list("?meterCode=zeta")), "[zeta/USD/1/1]"; got != want {
		t.Fatalf("filtered list = %s, want %s", got, want)
	}
	r := do(t, e.srv, "GET", "/v1/tenants/nobody/prices", "", "")
	if r.status != 200 || strings.TrimSpace(r.body) != `{"prices":[]}` {
		t.Fatalf("empty list: %d %s", r.status, r.body)
	}
}

func TestDatabaseUnavailable(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv := serve(t, pool)
	r := do(t, srv, "POST", "/v1/tenants/t1/prices", "k", `{"meterCode":"m","currency":"USD","unitPrice":"1"}`)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"code":"database_unavailable"`) {
		t.Fatalf("got %d %s, want 503 database_unavailable", r.status, r.body)
	}
	r = do(t, srv, "GET", "/v1/tenants/t1/prices", "", "")
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("list: got %d %s", r.status, r.body)
	}
}

type pricePage struct {
	Prices []price `json:"prices"`
	Next   *string `json:"next"`
}

// listPage reads one page of t1's prices; next is absent, not null, on the
// last page.
func listPage(t *testing.T, e *env, query string) pricePage {
	t.Helper()
	r := do(t, e.srv, "GET", "/v1/tenants/t1/prices?"+query, "", "")
	if r.status != http.StatusOK {
		t.Fatalf("list %s: %d %s", query, r.status, r.body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.body), &raw); err != nil {
		t.Fatal(err)
	}
	if next, ok := raw["next"]; ok && string(next) == "null" {
		t.Fatalf("list %s: next is null, want it absent on the last page", query)
	}
	var p pricePage
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// listAll follows next from the first page to the last; pages are the
// page sizes.
func listAll(t *testing.T, e *env, query string) (keys []string, pages []int) {
	t.Helper()
	cursor := ""
	for {
		q := query
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		p := listPage(t, e, q)
		pages = append(pages, len(p.Prices))
		for _, pr := range p.Prices {
			keys = append(keys, fmt.Sprintf("%s/%s/%d", pr.MeterCode, pr.Currency, pr.Version))
		}
		if p.Next == nil {
			return keys, pages
		}
		if len(pages) > 100 {
			t.Fatal("next never ends")
		}
		cursor = *p.Next
	}
}

func activate(t *testing.T, e *env, tenant, meter, currency string) {
	t.Helper()
	body := fmt.Sprintf(`{"meterCode":%q,"currency":%q,"unitPrice":"1"}`, meter, currency)
	if r := do(t, e.srv, "POST", "/v1/tenants/"+tenant+"/prices", uuid.NewString(), body); r.status != http.StatusCreated {
		t.Fatalf("activate %s %s: %d %s", meter, currency, r.status, r.body)
	}
}

func TestListPricesPages(t *testing.T) {
	e := newEnv(t)
	for _, p := range []struct{ meter, currency string }{
		{"zeta", "USD"}, {"alpha", "USD"}, {"alpha", "EUR"}, {"alpha", "EUR"}, {"beta", "KRW"},
		{"alpha", "EUR"}, {"beta", "USD"},
	} {
		activate(t, e, "t1", p.meter, p.currency)
	}
	activate(t, e, "t2", "alpha", "AUD") // another tenant's, never listed
	all := []string{"alpha/EUR/1", "alpha/EUR/2", "alpha/EUR/3", "alpha/USD/1", "beta/KRW/1", "beta/USD/1", "zeta/USD/1"}

	tests := []struct {
		name  string
		query string
		want  []string
		pages []int
	}{
		{"default limit: one page", "", all, []int{7}},
		{"pages of 3", "limit=3", all, []int{3, 3, 1}},
		{"pages of 1", "limit=1", all, []int{1, 1, 1, 1, 1, 1, 1}},
		{"the last page full", "limit=7", all, []int{7}},
		{"pages of 4", "limit=4", all, []int{4, 3}},
		{"largest limit", "limit=1000", all, []int{7}},
		{"one meter, pages of 2", "meterCode=alpha&limit=2", all[:4], []int{2, 2}},
		{"one meter, one page", "meterCode=beta", all[4:6], []int{2}},
		{"a meter without prices", "meterCode=gamma&limit=2", nil, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, pages := listAll(t, e, tt.query)
			if fmt.Sprint(keys) != fmt.Sprint(tt.want) || fmt.Sprint(pages) != fmt.Sprint(tt.pages) {
				t.Fatalf("listed %v in pages %v, want %v in pages %v", keys, pages, tt.want, tt.pages)
			}
		})
	}

	// A page follows its cursor's position, not an offset: versions
	// activated meanwhile before the position shift nothing, those after it
	// are listed.
	first := listPage(t, e, "limit=3")
	activate(t, e, "t1", "aardvark", "USD")
	activate(t, e, "t1", "alpha", "EUR")
	activate(t, e, "t1", "omega", "USD")
	second := listPage(t, e, "limit=3&cursor="+url.QueryEscape(*first.Next))
	var got []string
	for _, p := range second.Prices {
		got = append(got, fmt.Sprintf("%s/%s/%d", p.MeterCode, p.Currency, p.Version))
	}
	if want := "[alpha/EUR/4 alpha/USD/1 beta/KRW/1]"; fmt.Sprint(got) != want || second.Next == nil {
		t.Fatalf("second page after activations: %v (next %v), want %s", got, second.Next, want)
	}
}

func TestListPricesBadPage(t *testing.T) {
	e := newEnv(t)
	activate(t, e, "t1", "alpha", "USD")
	activate(t, e, "t1", "alpha", "EUR")
	activate(t, e, "t1", "beta", "USD")
	alphaNext := listPage(t, e, "meterCode=alpha&limit=1").Next
	allNext := listPage(t, e, "limit=1").Next
	if alphaNext == nil || allNext == nil {
		t.Fatal("no next page")
	}
	tests := []struct{ name, query, code string }{
		{"limit 0", "limit=0", "invalid_limit"},
		{"limit over 1000", "limit=1001", "invalid_limit"},
		{"negative limit", "limit=-5", "invalid_limit"},
		{"limit not a number", "limit=ten", "invalid_limit"},
		{"cursor not base64", "cursor=%21%21", "invalid_cursor"},
		{"cursor not a position", "cursor=bm90IGpzb24", "invalid_cursor"},
		{"cursor too long", "cursor=" + strings.Repeat("e", 2000), "invalid_cursor"},
		{"another meter's cursor", "meterCode=beta&cursor=" + url.QueryEscape(*alphaNext), "invalid_cursor"},
		{"the unfiltered list's cursor", "meterCode=beta&cursor=" + url.QueryEscape(*allNext), "invalid_cursor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, e.srv, "GET", "/v1/tenants/t1/prices?"+tt.query, "", "")
			if r.status != http.StatusBadRequest || !strings.Contains(r.body, `"code":"`+tt.code+`"`) ||
				r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %d %s, want 400 %s", r.status, r.body, tt.code)
			}
		})
	}
	// A meter's cursor goes on in its own list, and one of the unfiltered
	// list in the unfiltered list.
	if p := listPage(t, e, "meterCode=alpha&cursor="+url.QueryEscape(*alphaNext)); len(p.Prices) != 1 || p.Prices[0].Currency != "USD" {
		t.Fatalf("alpha's second page: %+v", p)
	}
	if p := listPage(t, e, "limit=5&cursor="+url.QueryEscape(*allNext)); len(p.Prices) != 2 || p.Next != nil {
		t.Fatalf("second page: %+v", p)
	}
}

// A price may not take effect inside the schedule already published to
// raters (decision 0011): 422 schedule_already_published, nothing written.
// Without effectiveAt it takes effect right after the published watermark.
func TestActivationInsideThePublishedScheduleIsRefused(t *testing.T) {
	e := newEnv(t)
	post := func(key, body string) response {
		return do(t, e.srv, "POST", "/v1/tenants/t1/prices", key, body)
	}
	r := post("v1", `{"meterCode":"m","currency":"USD","unitPrice":"1"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("v1: %d %s", r.status, r.body)
	}
	v1 := decodePrice(t, r.body)
	before := written(t, e.pool)
	r = post("inside", fmt.Sprintf(`{"meterCode":"m","currency":"USD","unitPrice":"2","effectiveAt":%q}`,
		rfc(v1.EffectiveAt.Add(time.Second))))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"code":"schedule_already_published"`) {
		t.Fatalf("inside the published schedule: %d %s", r.status, r.body)
	}
	if n := written(t, e.pool); n != before {
		t.Fatalf("a refused activation wrote %d rows", n-before)
	}
	r = post("v2", `{"meterCode":"m","currency":"USD","unitPrice":"2"}`)
	v2 := decodePrice(t, r.body)
	if r.status != http.StatusCreated || !v2.EffectiveAt.After(v1.EffectiveAt.Add(app.DefaultScheduleLead-time.Second)) {
		t.Fatalf("v2 without effectiveAt: %d %s, want effective after v1's watermark (%s + lead)", r.status, r.body, v1.EffectiveAt)
	}
}

// The other pricing models over HTTP: the answer, the list and the
// PriceActivated carry the model and its fields; an invalid one is refused
// with its code and writes nothing.
func TestActivateOtherModels(t *testing.T) {
	e := newEnv(t)
	r := do(t, e.srv, "POST", "/v1/tenants/t1/prices", "g1", `{"meterCode":"api","currency":"USD","model":"graduated",
		"tiers":[{"upTo":"1000","unitPrice":"0"},{"upTo":"10000","unitPrice":"0.002","flatFee":"1"},{"unitPrice":"0.001"}]}`)
	if r.status != http.StatusCreated || !strings.Contains(r.body, `"model":"graduated"`) || strings.Contains(r.body, `"unitPrice":"0","tiers"`) ||
		!strings.Contains(r.body, `"tiers":[{"upTo":"1000","unitPrice":"0","flatFee":"0"},{"upTo":"10000","unitPrice":"0.002","flatFee":"1"},{"unitPrice":"0.001","flatFee":"0"}]`) {
		t.Fatalf("graduated: %d %s", r.status, r.body)
	}
	r = do(t, e.srv, "POST", "/v1/tenants/t1/prices", "p1", `{"meterCode":"storage","currency":"USD","model":"package","packageSize":"100","packagePrice":"2.50"}`)
	if r.status != http.StatusCreated || !strings.Contains(r.body, `"packageSize":"100","packagePrice":"2.5"`) {
		t.Fatalf("package: %d %s", r.status, r.body)
	}
	list := do(t, e.srv, "GET", "/v1/tenants/t1/prices", "", "")
	if !strings.Contains(list.body, `"model":"graduated"`) || !strings.Contains(list.body, `"model":"package"`) {
		t.Fatalf("list: %s", list.body)
	}
	evs := outboxEvents(t, e.pool)
	g := evs[0].Payload.(events.PriceActivated)
	if g.Model != "graduated" || len(g.Tiers) != 3 || !g.Pricing().Amount(decimal.RequireFromString("12000")).Equal(decimal.RequireFromString("21")) {
		t.Fatalf("PriceActivated %+v", g)
	}

	before := written(t, e.pool)
	for body, code := range map[string]string{
		`{"meterCode":"m","currency":"USD","model":"volume","tiers":[{"upTo":"10","unitPrice":"1"}]}`:                                                "last_tier_not_open",
		`{"meterCode":"m","currency":"USD","model":"volume","tiers":[{"upTo":"10","unitPrice":"1"},{"upTo":"5","unitPrice":"1"},{"unitPrice":"1"}]}`: "tiers_not_ascending",
		`{"meterCode":"m","currency":"USD","model":"package","packageSize":"0","packagePrice":"1"}`:                                                  "invalid_package_size",
		`{"meterCode":"m","currency":"USD","model":"package","packageSize":10,"packagePrice":"1"}`:                                                   "invalid_package_size",
		`{"meterCode":"m","currency":"USD","model":"flat","unitPrice":"1"}`:                                                                          "invalid_model",
		`{"meterCode":"m","currency":"USD","unitPrice":"0.1234567890123"}`:                                                                           "too_many_decimal_places",
	} {
		r := do(t, e.srv, "POST", "/v1/tenants/t1/prices", "bad-"+code, body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `"code":"`+code+`"`) {
			t.Errorf("%s: %d %s, want 400 %s", body, r.status, r.body, code)
		}
	}
	if n := written(t, e.pool); n != before {
		t.Fatalf("refused activations wrote %d rows", n-before)
	}
}

// A tenant may have METER_MAX_PRICE_SERIES price series: the activation
// that would start one more is refused 422 limit_exceeded and writes
// nothing; a new version of a series it has, and another tenant's series,
// are not limited by it.
func TestPriceSeriesPerTenantAreLimited(t *testing.T) {
	e := newEnv(t)
	pool, srv := e.pool, serveWith(t, e.pool, app.Config{MaxSeries: 3})
	activate := func(tenant, meter, currency, key string) response {
		return do(t, srv, "POST", "/v1/tenants/"+tenant+"/prices", key,
			fmt.Sprintf(`{"meterCode":%q,"currency":%q,"unitPrice":"1"}`, meter, currency))
	}
	for i, s := range [][2]string{{"api", "USD"}, {"api", "EUR"}, {"storage", "USD"}} {
		if r := activate("t1", s[0], s[1], fmt.Sprintf("k%d", i)); r.status != http.StatusCreated {
			t.Fatalf("series %d: %d %s", i+1, r.status, r.body)
		}
	}
	before := len(outboxEvents(t, pool))
	r4 := activate("t1", "seats", "USD", "k4")
	if r4.status != http.StatusUnprocessableEntity || !strings.Contains(r4.body, `"code":"limit_exceeded"`) {
		t.Fatalf("a fourth series: %d %s, want 422 limit_exceeded", r4.status, r4.body)
	}
	if n := count(t, pool, `SELECT count(*) FROM price_series WHERE tenant_id = 't1'`); n != 3 {
		t.Errorf("%d series of t1 after the refusal, want 3", n)
	}
	if after := len(outboxEvents(t, pool)); after != before {
		t.Errorf("the refused activation wrote %d events", after-before)
	}
	if r := activate("t1", "api", "USD", "k5"); r.status != http.StatusCreated {
		t.Errorf("a new version of an existing series: %d %s", r.status, r.body)
	}
	if r := activate("t2", "seats", "USD", "k6"); r.status != http.StatusCreated {
		t.Errorf("another tenant's series: %d %s", r.status, r.body)
	}
}

// A tenant may have METER_MAX_PRICE_ENTRIES price entries (a series'
// dimension set, its default included) and METER_MAX_PRICE_VERSIONS_PER_MONTH
// versions taking effect in one UTC month: the activation past either is
// refused 422 limit_exceeded and writes nothing; a version of an entry it
// has, versions taking effect in the month before and the month after, and
// another tenant's are not limited by the first tenant's month.
func TestPriceEntriesAndMonthlyVersionsAreLimited(t *testing.T) {
	e := newEnv(t)
	if r := define(t, e, "m1", tokensMeter); r.status != http.StatusCreated {
		t.Fatalf("define: %d %s", r.status, r.body)
	}
	pool, srv := e.pool, serveWith(t, e.pool, app.Config{MaxEntries: 4, MaxMonthlyVersions: 4})
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month()+3, 1, 1, 0, 0, 0, time.UTC) // months no clock reaches in the test
	before, after := month.AddDate(0, -1, 0), month.AddDate(0, 1, 0)
	step := 0
	activate := func(tenant, currency, dims string, at time.Time) response {
		step++
		return do(t, srv, "POST", "/v1/tenants/"+tenant+"/prices", fmt.Sprintf("k%d", step),
			fmt.Sprintf(`{"meterCode":"tokens","currency":%q,"unitPrice":"1","dimensions":%s,"effectiveAt":%q}`,
				currency, dims, at.Add(time.Duration(step)*time.Second).Format(time.RFC3339)))
	}
	accepted := func(what string, r response) {
		t.Helper()
		if r.status != http.StatusCreated {
			t.Fatalf("%s: %d %s, want 201", what, r.status, r.body)
		}
	}
	refused := func(what string, r response, detail string) {
		t.Helper()
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"code":"limit_exceeded"`) || !strings.Contains(r.body, detail) {
			t.Fatalf("%s: %d %s, want 422 limit_exceeded naming %s", what, r.status, r.body, detail)
		}
	}
	accepted("EUR's default in the month before", activate("t1", "EUR", `{}`, before))
	for _, dims := range []string{`{}`, `{"model":"a"}`, `{"model":"b"}`} {
		accepted("USD entry "+dims, activate("t1", "USD", dims, month))
	}
	events := len(outboxEvents(t, pool))
	refused("a fifth entry", activate("t1", "USD", `{"model":"c"}`, month), "METER_MAX_PRICE_ENTRIES")
	if n := count(t, pool, `SELECT count(*) FROM price_entry WHERE tenant_id = 't1'`); n != 4 {
		t.Errorf("%d price entries of t1 after the refusal, want 4", n)
	}
	accepted("a version of an entry t1 has (the month's fourth)", activate("t1", "USD", `{"model":"a"}`, month))
	refused("a fifth version in the month", activate("t1", "USD", `{}`, month), "METER_MAX_PRICE_VERSIONS_PER_MONTH")
	if n := count(t, pool, `SELECT count(*) FROM price WHERE tenant_id = 't1'`); n != 5 {
		t.Errorf("%d versions of t1 after the refusals, want 5", n)
	}
	if got := len(outboxEvents(t, pool)); got != events+1 {
		t.Errorf("%d events written by one activation and two refused ones, want 1", got-events)
	}
	accepted("a version in the month before", activate("t1", "EUR", `{}`, before))
	accepted("a version in the month after", activate("t1", "USD", `{}`, after))
	accepted("another tenant's entry in the month", activate("t2", "USD", `{"model":"c"}`, month))
}
