package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/testkit/authtest"
)

type meterBody struct {
	Code          string     `json:"code"`
	Name          string     `json:"name"`
	Aggregation   string     `json:"aggregation"`
	ValueProperty string     `json:"valueProperty"`
	Dimensions    []string   `json:"dimensions"`
	EventType     string     `json:"eventType"`
	Implied       bool       `json:"implied"`
	DefinedAt     time.Time  `json:"definedAt"`
	EventID       *uuid.UUID `json:"eventId"`
}

func decodeMeter(t *testing.T, body string) meterBody {
	t.Helper()
	var m meterBody
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return m
}

// send is do with the token of role ("" none: header X-No-Token).
func send(t *testing.T, e *env, role, method, path, key, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if role == "" {
		req.Header.Set(authtest.NoToken, "1")
	} else {
		req.Header.Set(asRole, role)
	}
	resp, err := e.srv.Client().Do(req)
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

// define sends POST /v1/meters as a catalog-admin.
func define(t *testing.T, e *env, key, body string) response {
	t.Helper()
	return send(t, e, auth.RoleCatalogAdmin, http.MethodPost, "/v1/meters", key, body)
}

// readMeter sends GET /v1/meters/{code} as a catalog-admin.
func readMeter(t *testing.T, e *env, code string) response {
	t.Helper()
	return send(t, e, auth.RoleCatalogAdmin, http.MethodGet, "/v1/meters/"+code, "", "")
}

// meterEvents are the MeterDefined events in the outbox, in append order.
func meterEvents(t *testing.T, e *env) []*envelope.Decoded {
	t.Helper()
	var out []*envelope.Decoded
	for _, d := range allEvents(t, e.pool) {
		if d.Envelope.EventType == events.TypeMeterDefined {
			out = append(out, d)
		}
	}
	return out
}

const tokensMeter = `{"code":"tokens","name":"Tokens","aggregation":"sum","dimensions":["model","region"],"eventType":"ai.tokens"}`

func TestDefineMeter(t *testing.T) {
	e := newEnv(t)
	before := time.Now().UTC().Truncate(time.Microsecond)
	r := define(t, e, "m1", tokensMeter)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("define: %d %s", r.status, r.body)
	}
	m := decodeMeter(t, r.body)
	if m.Code != "tokens" || m.Name != "Tokens" || m.Aggregation != "sum" || fmt.Sprint(m.Dimensions) != "[model region]" ||
		m.EventType != "ai.tokens" || m.Implied || m.EventID == nil || m.DefinedAt.Before(before) {
		t.Fatalf("meter %+v", m)
	}

	evs := meterEvents(t, e)
	if len(evs) != 1 || len(allEvents(t, e.pool)) != 1 {
		t.Fatalf("%d MeterDefined of %d events, want the one", len(evs), len(allEvents(t, e.pool)))
	}
	env := evs[0].Envelope
	md := evs[0].Payload.(events.MeterDefined)
	if env.EventID != *m.EventID || env.TenantID != events.CatalogTenant || env.AggregateType != events.AggregateMeter ||
		env.AggregateID != "tokens" || env.AggregateVersion != 1 || env.Producer != "meter" ||
		env.PartitionKey != events.CatalogTenant+"|meter|tokens" {
		t.Fatalf("envelope %+v", env)
	}
	if md.Code != "tokens" || md.Name != "Tokens" || md.Aggregation != "sum" || fmt.Sprint(md.Dimensions) != "[model region]" ||
		md.EventType != "ai.tokens" || md.Implied || md.Actor != testActor || !md.DefinedAt.Equal(m.DefinedAt) {
		t.Fatalf("MeterDefined %+v", md)
	}

	// GET answers the meter as defined.
	if g := readMeter(t, e, "tokens"); g.status != http.StatusOK || strings.TrimSpace(g.body) != strings.TrimSpace(r.body) {
		t.Fatalf("get: %d %s, want %s", g.status, g.body, r.body)
	}
	// eventType defaults to the code; a unique_count meter names its
	// valueProperty.
	r = define(t, e, "m2", `{"code":"active_users","name":"Active users","aggregation":"unique_count","valueProperty":"user_id"}`)
	if m := decodeMeter(t, r.body); r.status != http.StatusCreated || m.EventType != "active_users" || m.ValueProperty != "user_id" ||
		m.Dimensions == nil || len(m.Dimensions) != 0 {
		t.Fatalf("unique_count meter: %d %s", r.status, r.body)
	}
	// A definition never changes.
	for _, sql := range []string{`UPDATE meter SET name = 'other'`, `DELETE FROM meter`} {
		if _, err := e.pool.Exec(t.Context(), sql); err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Fatalf("%s: err = %v, want refused as immutable", sql, err)
		}
	}
}

func TestDefineMeterReplayAndConflicts(t *testing.T) {
	e := newEnv(t)
	first := define(t, e, "k1", tokensMeter)
	if first.status != http.StatusCreated {
		t.Fatalf("define: %d %s", first.status, first.body)
	}
	// The same key and body: the first answer, replayed.
	r := define(t, e, "k1", tokensMeter)
	if r.status != http.StatusCreated || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s replayed=%q", r.status, r.body, r.header.Get("Idempotent-Replayed"))
	}
	// The same key with another body.
	r = define(t, e, "k1", `{"code":"other","name":"Other","aggregation":"count"}`)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"code":"idempotency_key_reused"`) {
		t.Fatalf("reused key: %d %s", r.status, r.body)
	}
	// The same definition under another key (dimensions in another order):
	// 200 and the meter as first defined, nothing published again.
	r = define(t, e, "k2", `{"code":"tokens","name":"Tokens","aggregation":"sum","dimensions":["region","model"],"eventType":"ai.tokens"}`)
	if r.status != http.StatusOK || r.body != first.body || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("same definition: %d %s, want 200 %s", r.status, r.body, first.body)
	}
	if r := define(t, e, "k2", `{"code":"tokens","name":"Tokens","aggregation":"sum","dimensions":["region","model"],"eventType":"ai.tokens"}`); r.status != http.StatusOK ||
		r.header.Get("Idempotent-Replayed") != "true" || r.body != first.body {
		t.Fatalf("replay of the 200: %d %s", r.status, r.body)
	}
	if n := len(meterEvents(t, e)); n != 1 {
		t.Fatalf("%d MeterDefined, want 1", n)
	}

	before := written(t, e.pool)
	for _, tt := range []struct{ name, body, code string }{
		{"other name", `{"code":"tokens","name":"Tokens!","aggregation":"sum","dimensions":["model","region"],"eventType":"ai.tokens"}`, "meter_exists"},
		{"other aggregation", `{"code":"tokens","name":"Tokens","aggregation":"max","dimensions":["model","region"],"eventType":"ai.tokens"}`, "meter_exists"},
		{"fewer dimensions", `{"code":"tokens","name":"Tokens","aggregation":"sum","dimensions":["model"],"eventType":"ai.tokens"}`, "meter_exists"},
		{"default eventType", `{"code":"tokens","name":"Tokens","aggregation":"sum","dimensions":["model","region"]}`, "meter_exists"},
		{"eventType of another meter", `{"code":"tokens2","name":"Tokens","aggregation":"sum","eventType":"ai.tokens"}`, "event_type_taken"},
		{"eventType that is another's code", `{"code":"x","name":"X","aggregation":"sum","eventType":"tokens"}`, ""},
		{"code that is another's eventType", `{"code":"ai.tokens","name":"X","aggregation":"sum"}`, "event_type_taken"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := define(t, e, "k-"+tt.name, tt.body)
			if tt.code == "" {
				if r.status != http.StatusCreated {
					t.Fatalf("%d %s, want 201", r.status, r.body)
				}
				before = written(t, e.pool)
				return
			}
			if r.status != http.StatusConflict || !strings.Contains(r.body, `"code":"`+tt.code+`"`) {
				t.Fatalf("%d %s, want 409 %s", r.status, r.body, tt.code)
			}
			if n := written(t, e.pool); n != before {
				t.Fatalf("a refused definition wrote %d rows", n-before)
			}
		})
	}
	if g := readMeter(t, e, "tokens"); g.status != http.StatusOK || strings.TrimSpace(g.body) != first.body {
		t.Fatalf("the meter changed: %s, want %s", g.body, first.body)
	}
}

// Concurrent definitions of one code by different keys: one defines it,
// the others answer 200 with the same meter, and one MeterDefined is
// published.
func TestDefineMeterConcurrently(t *testing.T) {
	e := newEnv(t)
	const n = 6
	results := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = define(t, e, fmt.Sprintf("c%d", i), tokensMeter) })
	}
	wg.Wait()
	created := 0
	for _, r := range results {
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("%d %s", r.status, r.body)
		}
		if decodeMeter(t, r.body).EventID == nil || *decodeMeter(t, r.body).EventID != *decodeMeter(t, results[0].body).EventID {
			t.Fatalf("answers name different meters: %s, %s", r.body, results[0].body)
		}
	}
	if created != 1 || len(meterEvents(t, e)) != 1 {
		t.Fatalf("%d created, %d MeterDefined; want 1 and 1", created, len(meterEvents(t, e)))
	}
}

func TestDefineMeterBadInput(t *testing.T) {
	e := newEnv(t)
	long := func(n int) string { return strings.Repeat("x", n) }
	six := `["a","b","c","d","e","f"]`
	tests := []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"missing idempotency key", "", `{"code":"m","name":"M","aggregation":"sum"}`, 400, "missing_idempotency_key"},
		{"malformed json", "k", `{"code":`, 400, "malformed_json"},
		{"not an object", "k", `["m"]`, 400, "malformed_json"},
		{"unknown field", "k", `{"code":"m","name":"M","aggregation":"sum","groupBy":["a"]}`, 400, "unknown_field"},
		{"code not a string", "k", `{"code":7,"name":"M","aggregation":"sum"}`, 400, "invalid_field"},
		{"dimensions not a list", "k", `{"code":"m","name":"M","aggregation":"sum","dimensions":"model"}`, 400, "invalid_field"},
		{"missing code", "k", `{"name":"M","aggregation":"sum"}`, 400, "missing_field"},
		{"missing name", "k", `{"code":"m","aggregation":"sum"}`, 400, "missing_field"},
		{"missing aggregation", "k", `{"code":"m","name":"M"}`, 400, "missing_field"},
		{"code with a space", "k", `{"code":"api calls","name":"M","aggregation":"sum"}`, 400, "invalid_meter"},
		{"code too long", "k", `{"code":"` + long(65) + `","name":"M","aggregation":"sum"}`, 400, "invalid_meter"},
		{"name too long", "k", `{"code":"m","name":"` + long(201) + `","aggregation":"sum"}`, 400, "invalid_meter"},
		{"name with a control character", "k", `{"code":"m","name":"M\u0007","aggregation":"sum"}`, 400, "control_character"},
		{"unknown aggregation", "k", `{"code":"m","name":"M","aggregation":"avg"}`, 400, "invalid_meter"},
		{"upper-case aggregation", "k", `{"code":"m","name":"M","aggregation":"SUM"}`, 400, "invalid_meter"},
		{"unique_count without valueProperty", "k", `{"code":"m","name":"M","aggregation":"unique_count"}`, 400, "invalid_meter"},
		{"count with valueProperty", "k", `{"code":"m","name":"M","aggregation":"count","valueProperty":"q"}`, 400, "invalid_meter"},
		{"invalid valueProperty", "k", `{"code":"m","name":"M","aggregation":"max","valueProperty":"a b"}`, 400, "invalid_meter"},
		{"six dimensions", "k", `{"code":"m","name":"M","aggregation":"sum","dimensions":` + six + `}`, 400, "invalid_meter"},
		{"a dimension twice", "k", `{"code":"m","name":"M","aggregation":"sum","dimensions":["model","model"]}`, 400, "invalid_meter"},
		{"invalid dimension", "k", `{"code":"m","name":"M","aggregation":"sum","dimensions":["a/b"]}`, 400, "invalid_meter"},
		{"empty dimension", "k", `{"code":"m","name":"M","aggregation":"sum","dimensions":[""]}`, 400, "invalid_meter"},
		{"dimension is the valueProperty", "k", `{"code":"m","name":"M","aggregation":"unique_count","valueProperty":"user","dimensions":["user"]}`, 400, "invalid_meter"},
		{"eventType too long", "k", `{"code":"m","name":"M","aggregation":"sum","eventType":"` + long(201) + `"}`, 400, "invalid_meter"},
		{"eventType with a control character", "k", `{"code":"m","name":"M","aggregation":"sum","eventType":"a\tb"}`, 400, "invalid_meter"},
		{"body too large", "k", `{"code":"m","name":"M","aggregation":"sum","eventType":"` + strings.Repeat(" ", 20<<10) + `"}`, 413, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := define(t, e, tt.key, tt.body)
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
	for path, code := range map[string]string{"/v1/meters/a%20b": "invalid_meter", "/v1/meters/nothing": "meter_not_found"} {
		r := readMeter(t, e, strings.TrimPrefix(path, "/v1/meters/"))
		if (r.status != 400 && r.status != 404) || !strings.Contains(r.body, `"code":"`+code+`"`) {
			t.Fatalf("GET %s: %d %s, want %s", path, r.status, r.body, code)
		}
	}
}

// Only a catalog-admin defines meters; every role but platform-ingest
// (which reads nothing) reads them, the tenant roles of any tenant
// (auth.AllowAnyTenant).
func TestMeterRoles(t *testing.T) {
	e := newEnv(t)
	for _, role := range []string{auth.RoleViewer, auth.RoleBillingAdmin, auth.RoleIngest, auth.RoleOperator,
		auth.RoleService, auth.RolePlatformIngest} {
		r := send(t, e, role, http.MethodPost, "/v1/meters", "k-"+role, tokensMeter)
		if r.status != http.StatusForbidden || !strings.Contains(r.body, `"code":"forbidden"`) {
			t.Fatalf("define as %s: %d %s, want 403", role, r.status, r.body)
		}
	}
	if r := send(t, e, "", http.MethodPost, "/v1/meters", "k-none", tokensMeter); r.status != http.StatusUnauthorized {
		t.Fatalf("define without a token: %d %s", r.status, r.body)
	}
	if n := written(t, e.pool); n != 0 {
		t.Fatalf("refused definitions wrote %d rows", n)
	}
	if r := define(t, e, "k-admin", tokensMeter); r.status != http.StatusCreated {
		t.Fatalf("define as catalog-admin: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/v1/meters", "/v1/meters/tokens"} {
		for _, role := range []string{auth.RoleCatalogAdmin, auth.RoleOperator, auth.RoleService, auth.RoleViewer, auth.RoleBillingAdmin, auth.RoleIngest} {
			if r := send(t, e, role, http.MethodGet, path, "", ""); r.status != http.StatusOK || !strings.Contains(r.body, `"tokens"`) {
				t.Fatalf("GET %s as %s: %d %s", path, role, r.status, r.body)
			}
		}
		for _, role := range []string{auth.RolePlatformIngest} {
			if r := send(t, e, role, http.MethodGet, path, "", ""); r.status != http.StatusForbidden {
				t.Fatalf("GET %s as %s: %d %s, want 403", path, role, r.status, r.body)
			}
		}
		if r := send(t, e, "", http.MethodGet, path, "", ""); r.status != http.StatusUnauthorized {
			t.Fatalf("GET %s without a token: %d %s", path, r.status, r.body)
		}
	}
	// A catalog-admin has no tenant: it cannot activate a tenant's price.
	r := send(t, e, auth.RoleCatalogAdmin, http.MethodPost, "/v1/tenants/t1/prices", "p", `{"meterCode":"tokens","currency":"USD","unitPrice":"1"}`)
	if r.status != http.StatusForbidden {
		t.Fatalf("price as catalog-admin: %d %s", r.status, r.body)
	}
}

type meterPage struct {
	Meters []meterBody `json:"meters"`
	Next   *string     `json:"next"`
}

func TestListMeters(t *testing.T) {
	e := newEnv(t)
	if r := readMeters(t, e, ""); r.status != http.StatusOK || strings.TrimSpace(r.body) != `{"meters":[]}` {
		t.Fatalf("empty catalog: %d %s", r.status, r.body)
	}
	for i, code := range []string{"zeta", "alpha", "mu", "beta", "omega"} {
		if r := define(t, e, fmt.Sprint(i), fmt.Sprintf(`{"code":%q,"name":"N","aggregation":"count"}`, code)); r.status != http.StatusCreated {
			t.Fatalf("define %s: %d %s", code, r.status, r.body)
		}
	}
	activate(t, e, "t1", "api_calls", "USD") // implies a meter
	var codes []string
	var sizes []int
	cursor := ""
	for range 10 {
		q := "limit=2"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := readMeters(t, e, q)
		if r.status != http.StatusOK || strings.Contains(r.body, `"next":null`) {
			t.Fatalf("list %s: %d %s", q, r.status, r.body)
		}
		var p meterPage
		if err := json.Unmarshal([]byte(r.body), &p); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(p.Meters))
		for _, m := range p.Meters {
			codes = append(codes, m.Code)
		}
		if p.Next == nil {
			break
		}
		cursor = *p.Next
	}
	if got, want := fmt.Sprint(codes, sizes), "[alpha api_calls beta mu omega zeta] [2 2 2]"; got != want {
		t.Fatalf("listed %s, want %s", got, want)
	}
	for _, q := range []string{"limit=0", "limit=1001", "cursor=%21%21", "cursor=bm90IGpzb24"} {
		if r := readMeters(t, e, q); r.status != http.StatusBadRequest || (!strings.Contains(r.body, `"code":"invalid_limit"`) &&
			!strings.Contains(r.body, `"code":"invalid_cursor"`)) {
			t.Fatalf("list %s: %d %s, want 400", q, r.status, r.body)
		}
	}
}

func readMeters(t *testing.T, e *env, query string) response {
	t.Helper()
	return send(t, e, auth.RoleOperator, http.MethodGet, "/v1/meters?"+query, "", "")
}

// A price for a code not in the catalog defines a sum meter without
// dimensions in its transaction, published before the price; later prices
// of the code define nothing.
func TestImpliedMeterOnFirstPrice(t *testing.T) {
	e := newEnv(t)
	activate(t, e, "t1", "api_calls", "USD")
	evs := allEvents(t, e.pool)
	if len(evs) != 2 || evs[0].Envelope.EventType != events.TypeMeterDefined || evs[1].Envelope.EventType != events.TypePriceActivated {
		t.Fatalf("outbox %v, want MeterDefined then PriceActivated", eventTypes(evs))
	}
	md := evs[0].Payload.(events.MeterDefined)
	if md.Code != "api_calls" || md.Name != "api_calls" || md.Aggregation != "sum" || len(md.Dimensions) != 0 ||
		md.EventType != "api_calls" || !md.Implied || md.Actor != testActor || evs[0].Envelope.TenantID != events.CatalogTenant {
		t.Fatalf("implied MeterDefined %+v", md)
	}
	r := readMeter(t, e, "api_calls")
	m := decodeMeter(t, r.body)
	if r.status != http.StatusOK || !m.Implied || m.Aggregation != "sum" || m.EventID == nil || *m.EventID != evs[0].Envelope.EventID {
		t.Fatalf("implied meter: %d %s", r.status, r.body)
	}
	activate(t, e, "t1", "api_calls", "EUR")
	activate(t, e, "t2", "api_calls", "USD")
	if n := len(meterEvents(t, e)); n != 1 {
		t.Fatalf("%d MeterDefined after three prices of one code, want 1", n)
	}
	// Defining it as implied is a replay; otherwise it exists.
	if r := define(t, e, "same", `{"code":"api_calls","name":"api_calls","aggregation":"sum"}`); r.status != http.StatusOK || r.body != strings.TrimSpace(readMeter(t, e, "api_calls").body) {
		t.Fatalf("define the implied meter again: %d %s", r.status, r.body)
	}
	if r := define(t, e, "other", `{"code":"api_calls","name":"API calls","aggregation":"count"}`); r.status != http.StatusConflict ||
		!strings.Contains(r.body, `"code":"meter_exists"`) {
		t.Fatalf("redefine the implied meter: %d %s", r.status, r.body)
	}
	// A catalog meter's prices imply nothing.
	define(t, e, "tokens", tokensMeter)
	activate(t, e, "t1", "tokens", "USD")
	if n := len(meterEvents(t, e)); n != 2 {
		t.Fatalf("%d MeterDefined, want 2", n)
	}
	// A refused activation leaves no implied meter.
	r = do(t, e.srv, "POST", "/v1/tenants/t1/prices", "past", `{"meterCode":"later","currency":"USD","unitPrice":"1","effectiveAt":"2020-01-01T00:00:00Z"}`)
	if r.status != http.StatusUnprocessableEntity || readMeter(t, e, "later").status != http.StatusNotFound {
		t.Fatalf("backdated price: %d %s, and its meter is %d", r.status, r.body, readMeter(t, e, "later").status)
	}
}

// Tenants pricing one new code at once imply one meter.
func TestImpliedMeterConcurrently(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() { activate(t, e, fmt.Sprintf("t%d", i), "storage", "USD") })
	}
	wg.Wait()
	if n := len(meterEvents(t, e)); n != 1 {
		t.Fatalf("%d MeterDefined, want 1", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM price WHERE meter_code = 'storage'`); n != 6 {
		t.Fatalf("%d prices, want 6", n)
	}
}

// An implied meter whose code feeds another meter takes the next free
// eventType: implied.<code>, then implied.<code>.2, ...
func TestImpliedMeterEventTypeTaken(t *testing.T) {
	e := newEnv(t)
	define(t, e, "a", `{"code":"tokens","name":"Tokens","aggregation":"sum","eventType":"api_calls"}`)
	define(t, e, "b", `{"code":"seats","name":"Seats","aggregation":"max","eventType":"storage"}`)
	define(t, e, "c", `{"code":"users","name":"Users","aggregation":"count","eventType":"implied.storage"}`)
	activate(t, e, "t1", "api_calls", "USD")
	activate(t, e, "t1", "storage", "USD")
	for code, want := range map[string]string{"api_calls": "implied.api_calls", "storage": "implied.storage.2"} {
		if m := decodeMeter(t, readMeter(t, e, code).body); m.EventType != want || !m.Implied {
			t.Fatalf("implied meter %s: %+v, want eventType %s", code, m, want)
		}
	}
}

func eventTypes(evs []*envelope.Decoded) []string {
	out := make([]string, len(evs))
	for i, d := range evs {
		out[i] = d.Envelope.EventType
	}
	return out
}

// Dimension prices: names among the catalog meter's dimensions, values
// valid (invalid_dimensions), no two dimension sets of a series of equal
// size that could match one fact (ambiguous_price); the answer, the list
// and PriceActivated carry them.
func TestDimensionPrices(t *testing.T) {
	e := newEnv(t)
	define(t, e, "tokens", tokensMeter)
	activate(t, e, "t1", "api_calls", "USD") // an implied meter, without dimensions
	price := func(key, currency, dims string) response {
		t.Helper()
		body := fmt.Sprintf(`{"meterCode":"tokens","currency":%q,"unitPrice":"0.03","dimensions":%s}`, currency, dims)
		return do(t, e.srv, "POST", "/v1/tenants/t1/prices", key, body)
	}
	r := price("gpt4", "USD", `{"model":"gpt-4"}`)
	if r.status != http.StatusCreated || !strings.Contains(r.body, `"dimensions":{"model":"gpt-4"}`) {
		t.Fatalf("dimension price: %d %s", r.status, r.body)
	}
	evs := outboxEvents(t, e.pool)
	pa := evs[len(evs)-1].Payload.(events.PriceActivated)
	if fmt.Sprint(pa.Dimensions) != "map[model:gpt-4]" || pa.MeterCode != "tokens" || pa.Version != 1 {
		t.Fatalf("PriceActivated %+v", pa)
	}
	for _, ok := range []struct{ key, currency, dims string }{
		{"default", "USD", `{}`},                                 // the series' default
		{"gpt4-v2", "USD", `{"model":"gpt-4"}`},                  // a new version of the same entry
		{"gpt35", "USD", `{"model":"gpt-3.5"}`},                  // another model: never both
		{"gpt4-eu", "USD", `{"model":"gpt-4","region":"eu"}`},    // more specific
		{"gpt4-us", "USD", `{"model":"gpt-4","region":"us"}`},    // another region
		{"claude-eu", "USD", `{"region":"eu","model":"claude"}`}, // another model
		{"eu-in-eur", "EUR", `{"region":"eu"}`},                  // another series
	} {
		if r := price(ok.key, ok.currency, ok.dims); r.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", ok.key, r.status, r.body)
		}
	}
	before := written(t, e.pool)
	for _, bad := range []struct {
		name, meter, dims string
		status            int
		code              string
	}{
		{"one dimension overlapping another", "tokens", `{"region":"eu"}`, 409, "ambiguous_price"},
		{"two overlapping two", "tokens", `{"region":"us","model":"claude"}`, 201, ""},
		{"not a dimension of the meter", "tokens", `{"color":"red"}`, 400, "invalid_dimensions"},
		{"one of two not a dimension", "tokens", `{"model":"gpt-4","color":"red"}`, 400, "invalid_dimensions"},
		{"empty value", "tokens", `{"model":""}`, 400, "invalid_dimensions"},
		{"value too long", "tokens", `{"model":"` + strings.Repeat("v", 257) + `"}`, 400, "invalid_dimensions"},
		{"value with a control character", "tokens", `{"model":"a\u0001b"}`, 400, "invalid_dimensions"},
		{"value not a string", "tokens", `{"model":4}`, 400, "invalid_field"},
		{"an implied meter", "api_calls", `{"model":"gpt-4"}`, 400, "invalid_dimensions"},
		{"a code not in the catalog", "new_meter", `{"model":"gpt-4"}`, 400, "invalid_dimensions"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"meterCode":%q,"currency":"USD","unitPrice":"1","dimensions":%s}`, bad.meter, bad.dims)
			r := do(t, e.srv, "POST", "/v1/tenants/t1/prices", "bad-"+bad.name, body)
			if bad.code == "" {
				// {region=us, model=claude} disagrees with every other pair.
				if r.status != bad.status {
					t.Fatalf("%d %s, want %d", r.status, r.body, bad.status)
				}
				before = written(t, e.pool)
				return
			}
			if r.status != bad.status || !strings.Contains(r.body, `"code":"`+bad.code+`"`) {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, bad.status, bad.code)
			}
			if n := written(t, e.pool); n != before {
				t.Fatalf("a refused price wrote %d rows", n-before)
			}
		})
	}
	if readMeter(t, e, "new_meter").status != http.StatusNotFound {
		t.Fatal("a refused dimension price implied its meter")
	}

	r = do(t, e.srv, "GET", "/v1/tenants/t1/prices?meterCode=tokens", "", "")
	var list struct {
		Prices []struct {
			Currency   string            `json:"currency"`
			Version    int64             `json:"version"`
			Dimensions map[string]string `json:"dimensions"`
		} `json:"prices"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range list.Prices {
		got = append(got, fmt.Sprintf("%s/%d%v", p.Currency, p.Version, p.Dimensions))
	}
	want := "[EUR/1map[region:eu] USD/1map[model:gpt-4] USD/2map[] USD/3map[model:gpt-4] USD/4map[model:gpt-3.5] " +
		"USD/5map[model:gpt-4 region:eu] USD/6map[model:gpt-4 region:us] USD/7map[model:claude region:eu] USD/8map[model:claude region:us]]"
	if fmt.Sprint(got) != want {
		t.Fatalf("list %v\nwant %s", got, want)
	}
	if strings.Contains(r.body, `"dimensions":{}`) || strings.Contains(r.body, `"dimensions":null`) {
		t.Fatalf("a default price shows dimensions: %s", r.body)
	}
}
