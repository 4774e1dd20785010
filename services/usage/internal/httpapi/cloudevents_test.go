package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
	"github.com/usagebilling/billing/testkit/apitest"
)

const (
	ceSingle = "application/cloudevents+json"
	ceBatch  = "application/cloudevents-batch+json"
)

// Callers of the CloudEvents route.
var (
	acmeIngest = auth.NewClaimsRoles("ingest@acme.example", "acme", time.Hour, auth.RoleIngest)
	gateway    = auth.NewClaimsRoles("gateway", "", time.Hour, auth.RolePlatformIngest)
	acmeViewer = auth.NewClaimsRoles("viewer@acme.example", "acme", time.Hour, auth.RoleViewer)
)

// ceEnv is a usage service with the AI-API catalog, priced for acme and
// globex, served to several callers.
type ceEnv struct {
	*usagetest.Env
	at time.Time // a time under the prices
}

func newCEEnv(t *testing.T) *ceEnv {
	t.Helper()
	e := usagetest.New(t)
	e.ApplyMeters(t,
		catalog.Meter{Code: "tokens", Name: "Tokens", Aggregation: catalog.Sum, ValueProperty: "tokens", Dimensions: []string{"model", "region"}, EventType: "prompt"},
		catalog.Meter{Code: "users", Name: "Active users", Aggregation: catalog.UniqueCount, ValueProperty: "user_id", EventType: "active"},
		catalog.Meter{Code: "calls", Name: "Calls", Aggregation: catalog.Count},
		catalog.Meter{Code: "seats", Name: "Seats", Aggregation: catalog.Max, ValueProperty: "seats"},
	)
	from := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	var ps []usagetest.Price
	for _, tenant := range []string{"acme", "globex"} {
		for _, m := range []string{"tokens", "users", "calls"} {
			ps = append(ps, usagetest.Price{Tenant: tenant, Meter: m, Currency: "USD", Version: 1, UnitPrice: "0.01", EffectiveAt: from})
		}
	}
	e.ApplyPrices(t, ps...)
	return &ceEnv{Env: e, at: from.Add(time.Hour)}
}

// server serves the routes to caller c, every exchange checked against
// the OpenAPI document.
func (e *ceEnv) server(t *testing.T, c auth.Claims) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(apitest.Handler(t, usageapi.YAML(), e.RouterAs(c)))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, srv *httptest.Server, path, contentType, body string) response {
	t.Helper()
	req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
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

// ce renders a CloudEvent with its attributes; data is raw JSON ("" none).
func ce(id, subject, typ string, at time.Time, data string) string {
	s := fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"gw","subject":%q,"type":%q,"time":%q`, id, subject, typ, rfc(at))
	if data != "" {
		s += `,"data":` + data
	}
	return s + "}"
}

func batch(evs ...string) string { return "[" + strings.Join(evs, ",") + "]" }

type eventsProblem struct {
	Status int
	Code   string
	Errors []struct {
		Index  int
		Status int
		Code   string
		Detail string
	}
}

// errorsOf renders a refusal's errors as index:code.
func errorsOf(t *testing.T, body string) string {
	t.Helper()
	p := decode[eventsProblem](t, body)
	var out []string
	for _, e := range p.Errors {
		out = append(out, fmt.Sprintf("%d:%s", e.Index, e.Code))
	}
	return strings.Join(out, " ")
}

type factRow struct {
	Tenant, Meter, Quantity, Props string
}

func (e *ceEnv) facts(t *testing.T) []factRow {
	t.Helper()
	rows, err := e.Pool.Query(t.Context(), `SELECT tenant_id, meter_code, quantity::text, properties::text FROM usage_fact ORDER BY tenant_id, source_event_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []factRow
	for rows.Next() {
		var f factRow
		if err := rows.Scan(&f.Tenant, &f.Meter, &f.Quantity, &f.Props); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

func (e *ceEnv) written(t *testing.T) int {
	t.Helper()
	return e.Count(t, `SELECT (SELECT count(*) FROM usage_fact) + (SELECT count(*) FROM outbox_event)`)
}

// One CloudEvent maps onto its fact (DESIGN.md 3a): id, source, subject,
// type (by the meter's eventType), time, the quantity from
// data[valueProperty] exactly, the other members as properties. A replay
// is 204 too; /api/v1/events is the same route.
func TestCloudEventSingle(t *testing.T) {
	e := newCEEnv(t)
	srv := e.server(t, acmeIngest)
	ev := ce("ev-1", "acme", "prompt", e.at, `{"tokens":1234567890.123456789012,"model":"gpt-4","region":"eu","batch":7,"flags":{"a":true},"cached":false}`)
	for i, p := range []string{"/v1/events", "/api/v1/events", "/v1/events"} {
		if r := post(t, srv, p, ceSingle, ev); r.status != 204 || r.body != "" {
			t.Fatalf("send %d to %s: %d %s, want 204", i, p, r.status, r.body)
		}
	}
	got := e.facts(t)
	want := []factRow{{"acme", "tokens", "1234567890.123456789012", `{"batch": "7", "model": "gpt-4", "region": "eu"}`}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("facts %v, want %v", got, want)
	}
	evs := e.OutboxEvents(t)
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	p := evs[0].Payload.(events.UsageAccepted)
	if evs[0].Envelope.TenantID != "acme" || p.SourceSystem != "gw" || p.SourceEventID != "ev-1" || p.MeterCode != "tokens" ||
		p.Quantity.String() != "1234567890.123456789012" || !p.OccurredAt.Equal(e.at) || p.Currency != "USD" ||
		len(p.Properties) != 3 || p.Properties["model"] != "gpt-4" {
		t.Fatalf("UsageAccepted %+v of %+v", p, evs[0].Envelope)
	}
	// The fact is the tenant's like any other: GET shows it, and the
	// usage route sees the same identity.
	f := decode[struct{ UsageID string }](t, post(t, e.server(t, auth.NewClaimsRoles("i", "acme", time.Hour, auth.RoleIngest)), "/v1/tenants/acme/usage", "application/json",
		`{"sourceSystem":"gw","sourceEventId":"ev-1","meterCode":"tokens","quantity":"1234567890.123456789012","occurredAt":"`+rfc(e.at)+`","properties":{"model":"gpt-4","region":"eu","batch":"7"}}`).body)
	if f.UsageID != p.UsageID.String() {
		t.Fatalf("the usage route's replay answered %s, want %s", f.UsageID, p.UsageID)
	}
	// The same id with other content: 409, nothing written.
	other := ce("ev-1", "acme", "prompt", e.at, `{"tokens":"2","model":"gpt-4","region":"eu","batch":7}`)
	r := post(t, srv, "/v1/events", ceSingle, other)
	if r.status != 409 || !hasCode(r.body, "source_event_conflict") || errorsOf(t, r.body) != "0:source_event_conflict" {
		t.Fatalf("conflict: %d %s", r.status, r.body)
	}
	if n := len(e.facts(t)); n != 1 {
		t.Fatalf("%d facts after the conflict", n)
	}
}

// Each aggregation takes its quantity as section 3a says, from numbers and
// numeric strings alike.
func TestCloudEventAggregations(t *testing.T) {
	e := newCEEnv(t)
	e.ApplyPrices(t, usagetest.Price{Tenant: "acme", Meter: "seats", Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: e.at.Add(-time.Hour)})
	srv := e.server(t, acmeIngest)
	r := post(t, srv, "/v1/events", ceBatch, batch(
		ce("a", "acme", "prompt", e.at, `{"tokens":"0.000000000001","model":"gpt-4"}`),
		ce("b", "acme", "active", e.at, `{"user_id":42,"plan":"pro"}`),
		ce("c", "acme", "active", e.at, `{"user_id":"u-7"}`),
		ce("d", "acme", "calls", e.at, ``),
		ce("e", "acme", "calls", e.at, `{"path":"/v1/chat","status":200}`),
		ce("f", "acme", "seats", e.at, `{"seats":12}`),
	))
	if r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want := []factRow{
		{"acme", "tokens", "0.000000000001", `{"model": "gpt-4"}`},
		{"acme", "users", "1", `{"plan": "pro", "user_id": "42"}`},
		{"acme", "users", "1", `{"user_id": "u-7"}`},
		{"acme", "calls", "1", `{}`},
		{"acme", "calls", "1", `{"path": "/v1/chat", "status": "200"}`},
		{"acme", "seats", "12", `{}`},
	}
	if got := e.facts(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("facts\n%v\nwant\n%v", got, want)
	}
}

// A batch is all or nothing: one refused event and nothing is written; the
// answer names every refused event by index. Facts of several tenants
// (platform-ingest) are accepted together in one transaction.
func TestCloudEventBatchAllOrNothing(t *testing.T) {
	e := newCEEnv(t)
	gw := e.server(t, gateway)
	good := []string{
		ce("g1", "acme", "prompt", e.at, `{"tokens":10,"model":"gpt-4"}`),
		ce("g2", "globex", "prompt", e.at, `{"tokens":"20","model":"gpt-3"}`),
		ce("g3", "acme", "calls", e.at, ``),
	}
	tests := []struct {
		name   string
		evs    []string
		status int
		code   string
		errors string
	}{
		{"an unknown type", append(append([]string{}, good...), ce("x", "acme", "nope", e.at, ``)), 400, "unknown_event_type", "3:unknown_event_type"},
		{"the type is not the code", append([]string{ce("x", "acme", "tokens", e.at, `{"tokens":1}`)}, good...), 400, "unknown_event_type", "0:unknown_event_type"},
		{"a missing quantity and a bad one", append([]string{ce("x", "acme", "prompt", e.at, `{"model":"gpt-4"}`), good[0], ce("y", "globex", "prompt", e.at, `{"tokens":"ten"}`)}, good[1:]...),
			400, "events_refused", "0:missing_value_property 2:invalid_quantity"},
		{"an invalid CloudEvent", append(append([]string{}, good...), `{"specversion":"0.3","id":"x","source":"gw","subject":"acme","type":"calls","time":"`+rfc(e.at)+`"}`), 400, "invalid_field", "3:invalid_field"},
		{"no price for the tenant yet", append(append([]string{}, good...), ce("x", "globex", "seats", e.at, `{"seats":1}`)), 422, "no_price_in_effect", "3:no_price_in_effect"},
		{"one identity twice with other content", append(append([]string{}, good...), ce("g1", "acme", "prompt", e.at, `{"tokens":11,"model":"gpt-4"}`)), 409, "source_event_conflict", "3:source_event_conflict"},
		{"a conflict and an invalid event", append(append([]string{}, good...), ce("g1", "acme", "prompt", e.at, `{"tokens":11,"model":"gpt-4"}`), ce("x", "acme", "active", e.at, `{}`)), 400, "events_refused", "3:source_event_conflict 4:missing_value_property"},
		{"in the future", append(append([]string{}, good...), ce("x", "acme", "calls", time.Now().Add(time.Hour), ``)), 422, "occurred_in_future", "3:occurred_in_future"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, gw, "/v1/events", ceBatch, batch(tt.evs...))
			p := decode[eventsProblem](t, r.body)
			if r.status != tt.status || p.Status != tt.status || p.Code != tt.code || errorsOf(t, r.body) != tt.errors {
				t.Fatalf("%d %s, want %d %s with errors %s", r.status, r.body, tt.status, tt.code, tt.errors)
			}
			if n := e.written(t); n != 0 {
				t.Fatalf("a refused batch wrote %d rows", n)
			}
		})
	}
	// The good events alone: every fact of both tenants, then a replay.
	for i := range 2 {
		if r := post(t, gw, "/v1/events", ceBatch, batch(good...)); r.status != 204 {
			t.Fatalf("send %d: %d %s", i, r.status, r.body)
		}
	}
	want := []factRow{
		{"acme", "tokens", "10", `{"model": "gpt-4"}`},
		{"acme", "calls", "1", `{}`},
		{"globex", "tokens", "20", `{"model": "gpt-3"}`},
	}
	if got := e.facts(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("facts %v, want %v", got, want)
	}
	if n := len(e.OutboxEvents(t)); n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
	// A batch holding a replay and a new event: 204, one more fact.
	if r := post(t, gw, "/v1/events", ceBatch, batch(good[0], ce("g4", "globex", "calls", e.at, ``))); r.status != 204 {
		t.Fatalf("replay and new: %d %s", r.status, r.body)
	}
	if n := len(e.facts(t)); n != 4 {
		t.Fatalf("%d facts, want 4", n)
	}
}

// ingest reaches only its own tenant's subject, platform-ingest any; any
// other role none. A refused caller writes nothing.
func TestCloudEventRoles(t *testing.T) {
	e := newCEEnv(t)
	acme := ce("r1", "acme", "calls", e.at, ``)
	globex := ce("r2", "globex", "calls", e.at, ``)
	tests := []struct {
		name   string
		caller auth.Claims
		body   string
		status int
		errors string
	}{
		{"viewer", acmeViewer, batch(acme), 403, ""},
		{"another tenant's ingest", auth.NewClaimsRoles("i", "globex", time.Hour, auth.RoleIngest), batch(acme), 403, "0:forbidden"},
		{"ingest, one subject of another tenant", acmeIngest, batch(acme, globex), 403, "1:forbidden"},
		{"no claims", auth.Claims{}, batch(acme), 401, ""},
		{"ingest, its own tenant", acmeIngest, batch(acme), 204, ""},
		{"platform-ingest, any tenant", gateway, batch(acme, globex), 204, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.written(t)
			r := post(t, e.server(t, tt.caller), "/v1/events", ceBatch, tt.body)
			if r.status != tt.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, tt.status)
			}
			if tt.status == 403 && (!hasCode(r.body, "forbidden") || errorsOf(t, r.body) != tt.errors) {
				t.Fatalf("%s, want forbidden with errors %q", r.body, tt.errors)
			}
			if tt.status != 204 && e.written(t) != before {
				t.Fatal("a refused caller wrote rows")
			}
		})
	}
	if n := len(e.facts(t)); n != 2 {
		t.Fatalf("%d facts, want 2 (acme's and globex's)", n)
	}
}

// What is not a structured CloudEvents 1.0 request is refused as a whole
// (media type, JSON, bounds) or per event (attributes), writing nothing.
func TestCloudEventInvalid(t *testing.T) {
	e := newCEEnv(t)
	srv := e.server(t, gateway)
	at := rfc(e.at)
	attrs := func(drop string, set ...string) string {
		m := map[string]any{"specversion": "1.0", "id": "i", "source": "gw", "subject": "acme", "type": "calls", "time": at}
		delete(m, drop)
		for i := 0; i+1 < len(set); i += 2 {
			m[set[i]] = json.RawMessage(set[i+1]) // verbatim: numbers keep their text
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
	}{
		{"application/json", "application/json", attrs(""), 415, "unsupported_media_type"},
		{"a charset other than UTF-8", ceSingle + "; charset=latin1", attrs(""), 415, "unsupported_media_type"},
		{"not JSON", ceSingle, `{"id":`, 400, "malformed_json"},
		{"an array sent as one", ceSingle, batch(attrs("")), 400, "malformed_json"},
		{"one sent as a batch", ceBatch, attrs(""), 400, "malformed_json"},
		{"an empty batch", ceBatch, `[]`, 400, "missing_field"},
		{"a batch too large", ceBatch, batch(strings.Split(strings.Repeat(attrs("")+"\x00", 1001), "\x00")[:1001]...), 400, "batch_too_large"},
		{"an attribute twice", ceSingle, strings.Replace(attrs(""), `"id":"i"`, `"id":"i","id":"j"`, 1), 400, "duplicate_field"},
		{"no specversion", ceSingle, attrs("specversion"), 400, "missing_field"},
		{"specversion 0.3", ceSingle, attrs("", "specversion", `"0.3"`), 400, "invalid_field"},
		{"no id", ceSingle, attrs("id"), 400, "missing_field"},
		{"no source", ceSingle, attrs("source"), 400, "missing_field"},
		{"no type", ceSingle, attrs("type"), 400, "missing_field"},
		{"no subject", ceSingle, attrs("subject"), 400, "missing_field"},
		{"no time", ceSingle, attrs("time"), 400, "missing_field"},
		{"a time not RFC 3339", ceSingle, attrs("", "time", `"yesterday"`), 400, "invalid_field"},
		{"an id not a string", ceSingle, attrs("", "id", `7`), 400, "invalid_field"},
		{"a subject no tenant id", ceSingle, attrs("", "subject", `"acme corp"`), 400, "invalid_tenant_id"},
		{"an upper-case attribute", ceSingle, attrs("", "Region", `"eu"`), 400, "invalid_field"},
		{"data not an object", ceSingle, attrs("", "data", `[1]`), 400, "invalid_field"},
		{"binary data", ceSingle, attrs("", "data_base64", `"AAAA"`), 400, "invalid_field"},
		{"data not JSON", ceSingle, attrs("", "datacontenttype", `"text/plain"`), 400, "invalid_field"},
		{"an id with a space", ceSingle, attrs("", "id", `"a b"`), 400, "invalid_field"},
		{"17 properties", ceSingle, attrs("", "data", `{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1","h":"1","i":"1","j":"1","k":"1","l":"1","m":"1","n":"1","o":"1","p":"1","q":"1"}`), 400, "too_many_properties"},
		{"a property name outside the rule", ceSingle, attrs("", "data", `{"user id":"x"}`), 400, "invalid_properties"},
		{"a huge number", ceSingle, attrs("", "type", `"prompt"`, "data", `{"tokens":1`+strings.Repeat("0", 40)+`}`), 400, "number_too_large"},
		{"a quantity beyond 12 places", ceSingle, attrs("", "type", `"prompt"`, "data", `{"tokens":0.0000000000001}`), 400, "too_many_decimal_places"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, srv, "/v1/events", tt.contentType, tt.body)
			if r.status != tt.status || !hasCode(r.body, tt.code) {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if e.written(t) != 0 {
				t.Fatal("a refusal wrote rows")
			}
		})
	}
	// Extension attributes are allowed and not read; a datacontenttype of
	// JSON is.
	if r := post(t, srv, "/v1/events", ceSingle, attrs("", "traceparent", `"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`, "partitionkey", `7`, "datacontenttype", `"application/json"`)); r.status != 204 {
		t.Fatalf("extensions: %d %s", r.status, r.body)
	}
}

// A body over the batch's byte bound is refused before it is parsed.
func TestCloudEventBodyTooLarge(t *testing.T) {
	e := newCEEnv(t)
	srv := e.server(t, gateway)
	big := ce("big", "acme", "calls", e.at, `{"pad":"`+strings.Repeat("x", 2<<20)+`"}`)
	for _, ct := range []string{ceSingle, ceBatch} {
		body := big
		if ct == ceBatch {
			body = batch(big)
		}
		if r := post(t, srv, "/v1/events", ct, body); r.status != 413 || !hasCode(r.body, "body_too_large") {
			t.Fatalf("%s: %d %s", ct, r.status, r.body)
		}
	}
}
