package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
)

// withProps renders a usage body with a raw properties member.
func withProps(t *testing.T, u usage, props string) string {
	t.Helper()
	b := u.json(t)
	if props == "" {
		return b
	}
	return strings.TrimSuffix(b, "}") + `,"properties":` + props + `}`
}

// A fact's properties are kept with it, shown on GET, carried in its
// UsageAccepted and part of its content: the same ones (in any order) are
// a replay, other ones (or none) a conflict.
func TestPropertiesStoredAndReplayed(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := rfc(time.Now().Add(-time.Minute).Truncate(time.Second))
	u := usage{SourceSystem: "gw", SourceEventID: "p-1", MeterCode: "api", Quantity: "3", OccurredAt: at}
	r := e.do(t, "POST", path, withProps(t, u, `{"model":"gpt-4","region":"eu-west.1"}`))
	if r.status != 201 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	a := decode[accepted](t, r.body)
	f := e.do(t, "GET", path+"/"+a.UsageID, "")
	got := decode[struct{ Properties map[string]string }](t, f.body).Properties
	if f.status != 200 || len(got) != 2 || got["model"] != "gpt-4" || got["region"] != "eu-west.1" {
		t.Fatalf("fact: %d %s", f.status, f.body)
	}
	evs := e.OutboxEvents(t)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	if p := evs[0].Payload.(events.UsageAccepted); p.Properties["model"] != "gpt-4" || p.Properties["region"] != "eu-west.1" || len(p.Properties) != 2 {
		t.Fatalf("UsageAccepted properties %v", p.Properties)
	}

	if r := e.do(t, "POST", path, withProps(t, u, `{"region":"eu-west.1","model":"gpt-4"}`)); r.status != 200 || decode[accepted](t, r.body).UsageID != a.UsageID {
		t.Fatalf("replay in another order: %d %s", r.status, r.body)
	}
	for name, props := range map[string]string{
		"another value":      `{"model":"gpt-3","region":"eu-west.1"}`,
		"one more":           `{"model":"gpt-4","region":"eu-west.1","tier":"pro"}`,
		"one fewer":          `{"model":"gpt-4"}`,
		"none":               ``,
		"null":               `null`,
		"empty":              `{}`,
		"a name in its case": `{"Model":"gpt-4","region":"eu-west.1"}`,
	} {
		if r := e.do(t, "POST", path, withProps(t, u, props)); r.status != 409 || !hasCode(r.body, "source_event_conflict") {
			t.Errorf("%s: %d %s, want 409 source_event_conflict", name, r.status, r.body)
		}
	}

	// A fact without properties: none and {} are the same content, and GET
	// shows {}.
	plain := usage{SourceSystem: "gw", SourceEventID: "p-2", MeterCode: "api", Quantity: "1", OccurredAt: at}
	r = e.do(t, "POST", path, plain.json(t))
	if r.status != 201 {
		t.Fatalf("plain: %d %s", r.status, r.body)
	}
	if r2 := e.do(t, "POST", path, withProps(t, plain, `{}`)); r2.status != 200 {
		t.Fatalf("plain again with {}: %d %s", r2.status, r2.body)
	}
	if f := e.do(t, "GET", path+"/"+decode[accepted](t, r.body).UsageID, ""); !strings.Contains(f.body, `"properties":{}`) {
		t.Fatalf("plain fact: %s", f.body)
	}
	if p := e.OutboxEvents(t)[1].Payload.(events.UsageAccepted); p.Properties != nil {
		t.Fatalf("a fact without properties announced %v", p.Properties)
	}
	if n := e.Count(t, `SELECT count(*) FROM usage_fact`); n != 2 {
		t.Fatalf("%d facts, want 2", n)
	}
}

// Properties outside section 3a's limits are refused with a stable code
// and write nothing, alone or in a batch.
func TestPropertiesRefused(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	many := map[string]string{}
	for i := range catalog.MaxProperties + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	manyJSON, _ := json.Marshal(many)
	sixteen := map[string]string{}
	for i := range catalog.MaxProperties {
		sixteen[fmt.Sprintf("k%d", i)] = strings.Repeat("v", catalog.MaxPropertyValue)
	}
	sixteenJSON, _ := json.Marshal(sixteen)
	tests := []struct {
		name, props string
		status      int
		code        string
	}{
		{"17 properties", string(manyJSON), 400, "too_many_properties"},
		{"a name with a space", `{"a b":"x"}`, 400, "invalid_properties"},
		{"a name too long", `{"` + strings.Repeat("k", 65) + `":"x"}`, 400, "invalid_properties"},
		{"an empty name", `{"":"x"}`, 400, "invalid_properties"},
		{"a value too long", `{"k":"` + strings.Repeat("v", 257) + `"}`, 400, "invalid_properties"},
		{"a control character", `{"k":"a\tb"}`, 400, "invalid_properties"},
		{"a number", `{"k":1}`, 400, "invalid_properties"},
		{"a boolean", `{"k":true}`, 400, "invalid_properties"},
		{"a null value", `{"k":null}`, 400, "invalid_properties"},
		{"an object value", `{"k":{"a":"b"}}`, 400, "invalid_properties"},
		{"an array", `["a"]`, 400, "invalid_properties"},
		{"a string", `"model=gpt-4"`, 400, "invalid_properties"},
		{"a name twice", `{"k":"a","k":"b"}`, 400, "duplicate_field"},
		{"16 of 256 characters", string(sixteenJSON), 201, ""},
	}
	at := rfc(time.Now().Add(-time.Minute))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.written(t)
			u := usage{SourceSystem: "s", SourceEventID: fmt.Sprint("r", i), MeterCode: "api", Quantity: "1", OccurredAt: at}
			r := e.do(t, "POST", path, withProps(t, u, tt.props))
			if r.status != tt.status || (tt.code != "" && !hasCode(r.body, tt.code)) {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if tt.status >= 400 {
				if after := e.written(t); after != before {
					t.Fatalf("a refusal wrote %d rows", after-before)
				}
				b := e.do(t, "POST", path+":batch", `{"events":[`+withProps(t, u, tt.props)+`]}`)
				res := decode[struct{ Results []batchResult }](t, b.body).Results
				if tt.code != "duplicate_field" && (b.status != 200 || len(res) != 1 || res[0].Status != tt.status || res[0].Code != tt.code) {
					t.Fatalf("in a batch: %d %s", b.status, b.body)
				}
				if after := e.written(t); after != before {
					t.Fatalf("a refusal in a batch wrote %d rows", after-before)
				}
			}
		})
	}
}

// The catalog decides what a meter code is: a code neither in the catalog
// nor priced for the tenant is unknown_meter; a catalog meter the tenant
// has no price for yet is no_price_in_effect without a currency (none to
// rate it in) and accepted in the currency it names (rated unpriced, in
// another currency than the tenant's prices too); once priced, a fact
// before the first version is accepted (unpriced); a
// unique_count meter needs the property its valueProperty names.
func TestCatalogMeters(t *testing.T) {
	e := newEnv(t)
	e.ApplyMeters(t,
		catalog.Meter{Code: "seats", Name: "Seats", Aggregation: catalog.Max, ValueProperty: "seats"},
		catalog.Meter{Code: "users", Name: "Active users", Aggregation: catalog.UniqueCount, ValueProperty: "user_id"},
		catalog.Meter{Code: "later", Name: "Priced later", Aggregation: catalog.Sum},
	)
	now := time.Now().Truncate(time.Second)
	e.ApplyPrices(t,
		usagetest.Price{Tenant: "t1", Meter: "users", Currency: "EUR", Version: 1, UnitPrice: "2", EffectiveAt: now.Add(-time.Hour)},
		usagetest.Price{Tenant: "t1", Meter: "later", Currency: "USD", Version: 1, UnitPrice: "2", EffectiveAt: now.Add(time.Hour)},
	)
	at := rfc(now.Add(-time.Minute))
	tests := []struct {
		name   string
		body   string
		status int
		code   string
		detail string
	}{
		{"neither in the catalog nor priced", usage{MeterCode: "voice"}.json(t), 422, "unknown_meter", ""},
		{"in the catalog, no price yet", usage{MeterCode: "seats"}.json(t), 422, "no_price_in_effect", "no price for meter"},
		{"in the catalog, no price yet, currency named", withProps(t, usage{MeterCode: "seats", Currency: "JPY"}, `{"seats":"3"}`), 201, "", ""},
		{"priced in another currency, this one named", usage{MeterCode: "later", Currency: "KRW"}.json(t), 201, "", ""},
		{"priced, before its first version", usage{MeterCode: "later"}.json(t), 201, "", ""},
		{"unique_count without its value", withProps(t, usage{MeterCode: "users"}, `{"plan":"pro"}`), 400, "missing_value_property", "user_id"},
		{"unique_count with an empty value", withProps(t, usage{MeterCode: "users"}, `{"user_id":""}`), 400, "missing_value_property", ""},
		{"unique_count with its value", withProps(t, usage{MeterCode: "users"}, `{"user_id":"u-1"}`), 201, "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Replace(tt.body, `"meterCode"`, fmt.Sprintf(`"sourceSystem":"s","sourceEventId":"c%d","quantity":"1","occurredAt":%q,"meterCode"`, i, at), 1)
			before := e.written(t)
			r := e.do(t, "POST", path, body)
			if r.status != tt.status || (tt.code != "" && !hasCode(r.body, tt.code)) || !strings.Contains(r.body, tt.detail) {
				t.Fatalf("%d %s, want %d %s (%q)", r.status, r.body, tt.status, tt.code, tt.detail)
			}
			if tt.status >= 400 && e.written(t) != before {
				t.Fatal("a refusal wrote rows")
			}
		})
	}
	var cur string
	if err := e.Pool.QueryRow(t.Context(), `SELECT currency FROM usage_fact WHERE meter_code = 'later' AND currency <> 'KRW'`).Scan(&cur); err != nil || cur != "USD" {
		t.Fatalf("the fact before the first price: currency %q (%v), want USD", cur, err)
	}
}
