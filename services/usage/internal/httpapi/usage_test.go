package httpapi_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/httpapi"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/authtest"
)

const path = "/v1/tenants/t1/usage"

// twoVersions activates api/USD version 1 two hours ago and version 2 one
// hour ago, through the inbox.
func twoVersions(t *testing.T, e *env) (v1At, v2At time.Time) {
	t.Helper()
	v1At = time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second)
	v2At = v1At.Add(time.Hour)
	e.ApplyPrices(t,
		usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: 1, UnitPrice: "0.10", EffectiveAt: v1At},
		usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: 2, UnitPrice: "0.20", EffectiveAt: v2At},
	)
	return v1At, v2At
}

// Usage accepts a fact of a priced meter whatever version is in effect at
// its occurrence and says no version: the rater decides it (decision 0011).
// Before the series' first version it accepts it too: the rater rates it
// unpriced, provably, from the series' watermark (section 3a).
func TestAcceptedWithoutAPriceVersion(t *testing.T) {
	e := newEnv(t)
	v1At, v2At := twoVersions(t, e)
	tests := []struct {
		name    string
		at      time.Time
		status  int
		version int64
		code    string
	}{
		{"before the first version", v1At.Add(-time.Microsecond), 201, 0, ""},
		{"when version 1 takes effect", v1At, 201, 1, ""},
		{"under version 1", v1At.Add(30 * time.Minute), 201, 1, ""},
		{"just before version 2", v2At.Add(-time.Microsecond), 201, 1, ""},
		{"when version 2 takes effect", v2At, 201, 2, ""},
		{"under version 2", time.Now().Add(-time.Minute), 201, 2, ""},
		{"a little in the future", time.Now().Add(4 * time.Minute), 201, 2, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := usage{SourceSystem: "s", SourceEventID: fmt.Sprint(i), MeterCode: "api", Quantity: "2", OccurredAt: rfc(tt.at)}.json(t)
			r := e.do(t, "POST", path, body)
			if r.status != tt.status {
				t.Fatalf("status %d %s, want %d", r.status, r.body, tt.status)
			}
			if tt.code != "" {
				if !hasCode(r.body, tt.code) {
					t.Fatalf("body %s, want code %s", r.body, tt.code)
				}
				return
			}
			a := decode[accepted](t, r.body)
			if strings.Contains(r.body, "priceVersion") || a.UsageID == "" || a.EventID == "" {
				t.Fatalf("answer %s, want {usageId, eventId}", r.body)
			}
			f := e.do(t, "GET", path+"/"+a.UsageID, "")
			if f.status != 200 || strings.Contains(f.body, "priceVersion") || !strings.Contains(f.body, `"currency":"USD"`) {
				t.Fatalf("fact: %d %s", f.status, f.body)
			}
		})
	}
	evs := e.OutboxEvents(t)
	if len(evs) != 7 {
		t.Fatalf("%d events, want 7", len(evs))
	}
	for _, d := range evs {
		p := d.Payload.(events.UsageAccepted)
		if p.PriceVersion != 0 || strings.Contains(string(d.Envelope.Payload), "priceVersion") || d.Envelope.AggregateType != events.AggregateUsage ||
			d.Envelope.AggregateID != p.UsageID.String() || d.Envelope.AggregateVersion != 1 || p.Currency != "USD" {
			t.Fatalf("event %+v payload %+v", d.Envelope, p)
		}
		if n := e.Count(t, `SELECT count(*) FROM usage_fact WHERE event_id = $1 AND usage_id = $2`, d.Envelope.EventID, p.UsageID); n != 1 {
			t.Fatalf("fact of event %s: %d rows", d.Envelope.EventID, n)
		}
	}
}

func TestReplayAndConflict(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := rfc(time.Now().Add(-time.Minute).Truncate(time.Second))
	first := usage{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "1.50", OccurredAt: at}
	r := e.do(t, "POST", path, first.json(t))
	if r.status != 201 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	body := r.body

	same := []usage{
		first,
		{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "1.5", OccurredAt: at}, // same value
		{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "1.50", OccurredAt: at, Currency: "USD"},
	}
	for i, u := range same {
		if r := e.do(t, "POST", path, u.json(t)); r.status != 200 || r.body != body {
			t.Fatalf("replay %d: %d %s, want 200 %s", i, r.status, r.body, body)
		}
	}
	other := []usage{
		{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "2", OccurredAt: at},
		{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "1.50", OccurredAt: rfc(time.Now().Add(-2 * time.Minute))},
		{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "1.50", OccurredAt: at, Currency: "EUR"},
		{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "unpriced", Quantity: "1.50", OccurredAt: at},
	}
	for i, u := range other {
		if r := e.do(t, "POST", path, u.json(t)); r.status != 409 || !hasCode(r.body, "source_event_conflict") {
			t.Fatalf("conflict %d: %d %s, want 409 source_event_conflict", i, r.status, r.body)
		}
	}
	// Another source system, or another tenant, is another identity.
	if r := e.do(t, "POST", path, usage{SourceSystem: "gw2", SourceEventID: "ev-1", MeterCode: "api", Quantity: "2", OccurredAt: at}.json(t)); r.status != 201 {
		t.Fatalf("other source system: %d %s", r.status, r.body)
	}
	if n := e.Count(t, `SELECT count(*) FROM usage_fact`); n != 2 {
		t.Fatalf("%d facts, want 2", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM outbox_event`); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
	// The fact kept its first content.
	a := decode[accepted](t, body)
	f := e.do(t, "GET", path+"/"+a.UsageID, "")
	if !strings.Contains(f.body, `"quantity":"1.5"`) || !strings.Contains(f.body, `"occurredAt":"`+at+`"`) {
		t.Fatalf("fact changed: %s", f.body)
	}
}

func TestConcurrentIdentical(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := rfc(time.Now().Add(-time.Minute))
	const n = 8
	results := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i] = e.do(t, "POST", path, usage{SourceSystem: "s", SourceEventID: "x", MeterCode: "api", Quantity: "3", OccurredAt: at}.json(t))
		})
	}
	wg.Wait()
	created := 0
	for _, r := range results {
		switch {
		case r.status == 201:
			created++
		case r.status != 200:
			t.Fatalf("status %d %s", r.status, r.body)
		}
		if r.body != results[0].body {
			t.Fatalf("bodies differ: %s vs %s", r.body, results[0].body)
		}
	}
	if created != 1 {
		t.Fatalf("%d created, want 1", created)
	}
	if c := e.Count(t, `SELECT count(*) FROM usage_fact`); c != 1 {
		t.Fatalf("%d facts, want 1", c)
	}
	if c := e.Count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'UsageAccepted'`); c != 1 {
		t.Fatalf("%d UsageAccepted events, want 1", c)
	}
}

func TestConcurrentDifferentContent(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := rfc(time.Now().Add(-time.Minute))
	const n = 8
	results := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			qty := fmt.Sprint(i % 2) // two contents, four requests each
			results[i] = e.do(t, "POST", path, usage{SourceSystem: "s", SourceEventID: "x", MeterCode: "api", Quantity: qty, OccurredAt: at}.json(t))
		})
	}
	wg.Wait()
	winner := -1
	for i, r := range results {
		if r.status == 201 {
			if winner >= 0 {
				t.Fatal("two requests created the fact")
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no request created the fact")
	}
	for i, r := range results {
		switch {
		case i == winner:
		case i%2 == winner%2 && (r.status != 200 || r.body != results[winner].body):
			t.Fatalf("same content as the winner: %d %s", r.status, r.body)
		case i%2 != winner%2 && (r.status != 409 || !hasCode(r.body, "source_event_conflict")):
			t.Fatalf("other content than the winner: %d %s", r.status, r.body)
		}
	}
	if c := e.Count(t, `SELECT count(*) FROM outbox_event`); c != 1 {
		t.Fatalf("%d events, want 1", c)
	}
}

func TestPriceEvidenceRules(t *testing.T) {
	e := newEnv(t)
	past := time.Now().Add(-time.Hour)
	e.ApplyPrices(t,
		usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: past},
		usagetest.Price{Tenant: "t1", Meter: "sms", Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: past},
		usagetest.Price{Tenant: "t1", Meter: "sms", Currency: "KRW", Version: 1, UnitPrice: "15", EffectiveAt: past},
		usagetest.Price{Tenant: "t2", Meter: "mms", Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: past},
	)
	at := rfc(time.Now())
	tests := []struct {
		name     string
		u        usage
		status   int
		code     string
		currency string
	}{
		{"unknown meter", usage{MeterCode: "voice"}, 422, "unknown_meter", ""},
		{"another tenant's meter", usage{MeterCode: "mms"}, 422, "unknown_meter", ""},
		{"currency not priced", usage{MeterCode: "api", Currency: "EUR"}, 422, "unknown_meter", ""},
		{"several currencies", usage{MeterCode: "sms"}, 422, "currency_required", ""},
		{"several currencies, one named", usage{MeterCode: "sms", Currency: "KRW"}, 201, "", "KRW"},
		{"one currency implied", usage{MeterCode: "api"}, 201, "", "USD"},
		{"one currency named", usage{MeterCode: "api", Currency: "USD"}, 201, "", "USD"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.written(t)
			u := tt.u
			u.SourceSystem, u.SourceEventID, u.Quantity, u.OccurredAt = "s", fmt.Sprint(i), "1", at
			r := e.do(t, "POST", path, u.json(t))
			if r.status != tt.status || (tt.code != "" && !hasCode(r.body, tt.code)) {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if tt.code != "" {
				if n := e.written(t) - before; n != 0 {
					t.Fatalf("a refused fact wrote %d rows", n)
				}
				return
			}
			a := decode[accepted](t, r.body)
			if f := e.do(t, "GET", path+"/"+a.UsageID, ""); !strings.Contains(f.body, `"currency":"`+tt.currency+`"`) {
				t.Fatalf("fact %s, want currency %s", f.body, tt.currency)
			}
		})
	}
	// A fact accepted while its meter had one currency still replays after
	// a second currency appears.
	r := e.do(t, "POST", path, usage{SourceSystem: "s", SourceEventID: "5", MeterCode: "api", Quantity: "1", OccurredAt: at}.json(t))
	if r.status != 200 {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	e.ApplyPrices(t, usagetest.Price{Tenant: "t1", Meter: "api", Currency: "EUR", Version: 1, UnitPrice: "1", EffectiveAt: past})
	if r2 := e.do(t, "POST", path, usage{SourceSystem: "s", SourceEventID: "5", MeterCode: "api", Quantity: "1", OccurredAt: at}.json(t)); r2.status != 200 || r2.body != r.body {
		t.Fatalf("replay after a second currency: %d %s", r2.status, r2.body)
	}
}

type batchResult struct {
	Status       int    `json:"status"`
	UsageID      string `json:"usageId"`
	EventID      string `json:"eventId"`
	PriceVersion *int64 `json:"priceVersion"` // never sent
	Code         string `json:"code"`
}

func TestBatchMixedResults(t *testing.T) {
	e := newEnv(t)
	v1At, _ := twoVersions(t, e)
	at := rfc(time.Now().Add(-time.Minute))
	old := rfc(v1At.Add(time.Minute))
	// A fact accepted before the batch.
	prior := e.do(t, "POST", path, usage{SourceSystem: "s", SourceEventID: "prior", MeterCode: "api", Quantity: "1", OccurredAt: at}.json(t))
	if prior.status != 201 {
		t.Fatalf("prior: %d %s", prior.status, prior.body)
	}
	priorID := decode[accepted](t, prior.body).UsageID

	items := []struct {
		u       usage
		status  int
		code    string
		version int64
	}{
		{usage{SourceEventID: "a", MeterCode: "api", Quantity: "1", OccurredAt: at}, 201, "", 2},
		{usage{SourceEventID: "b", MeterCode: "api", Quantity: "-1", OccurredAt: at}, 400, "invalid_quantity", 0},
		{usage{SourceEventID: "c", MeterCode: "voice", Quantity: "1", OccurredAt: at}, 422, "unknown_meter", 0},
		{usage{SourceEventID: "d", MeterCode: "api", Quantity: "4", OccurredAt: old}, 201, "", 1},
		{usage{SourceEventID: "a", MeterCode: "api", Quantity: "1.0", OccurredAt: at}, 200, "", 2}, // repeat of a in the batch
		{usage{SourceEventID: "a", MeterCode: "api", Quantity: "9", OccurredAt: at}, 409, "source_event_conflict", 0},
		{usage{SourceEventID: "prior", MeterCode: "api", Quantity: "1", OccurredAt: at}, 200, "", 2},
		{usage{SourceEventID: "prior", MeterCode: "api", Quantity: "2", OccurredAt: at}, 409, "source_event_conflict", 0},
		{usage{SourceEventID: "e", MeterCode: "api", Quantity: "1", OccurredAt: rfc(v1At.Add(-time.Hour))}, 201, "", 0}, // before the first price: unpriced
		{usage{SourceEventID: "f", MeterCode: "api", Quantity: "1", OccurredAt: rfc(time.Now().Add(time.Hour))}, 422, "occurred_in_future", 0},
		{usage{SourceEventID: "g", MeterCode: "api", Quantity: "1"}, 400, "missing_field", 0},
		{usage{SourceEventID: "h", MeterCode: "api", Quantity: 1, OccurredAt: at}, 400, "invalid_quantity", 0},
		{usage{SourceEventID: "i", MeterCode: "api", Quantity: "1", OccurredAt: at, Currency: "XXQ"}, 400, "unknown_currency", 0},
	}
	var parts []string
	for _, it := range items {
		u := it.u
		u.SourceSystem = "s"
		parts = append(parts, u.json(t))
	}
	r := e.do(t, "POST", path+":batch", `{"events":[`+strings.Join(parts, ",")+`]}`)
	if r.status != 200 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	res := decode[struct{ Results []batchResult }](t, r.body).Results
	if len(res) != len(items) {
		t.Fatalf("%d results, want %d", len(res), len(items))
	}
	for i, it := range items {
		got := res[i]
		if got.Status != it.status || got.Code != it.code || got.PriceVersion != nil {
			t.Errorf("item %d: got %+v, want status %d code %q and no version", i, got, it.status, it.code)
		}
		if (it.status < 300) != (got.UsageID != "" && got.EventID != "") {
			t.Errorf("item %d: ids %q %q", i, got.UsageID, got.EventID)
		}
	}
	if res[4].UsageID != res[0].UsageID || res[4].EventID != res[0].EventID {
		t.Errorf("repeat in batch answered %+v, want the ids of %+v", res[4], res[0])
	}
	if res[6].UsageID != priorID {
		t.Errorf("replay of the prior fact answered %s, want %s", res[6].UsageID, priorID)
	}
	// prior, a, d and e: four facts and four events.
	if n := e.Count(t, `SELECT count(*) FROM usage_fact`); n != 4 {
		t.Fatalf("%d facts, want 4", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM outbox_event`); n != 4 {
		t.Fatalf("%d events, want 4", n)
	}
}

func TestBatchLimits(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	one := usage{SourceSystem: "s", SourceEventID: "x", MeterCode: "api", Quantity: "1", OccurredAt: rfc(time.Now())}.json(t)
	tests := []struct {
		name, body string
		status     int
		code       string
	}{
		{"no events field", `{}`, 400, "missing_field"},
		{"empty events", `{"events":[]}`, 400, "missing_field"},
		{"null events", `{"events":null}`, 400, "missing_field"},
		{"too many", `{"events":[` + strings.TrimSuffix(strings.Repeat(one+",", 1001), ",") + `]}`, 400, "batch_too_large"},
		{"malformed", `{"events":[`, 400, "malformed_json"},
		{"unknown field", `{"events":[],"dryRun":true}`, 400, "unknown_field"},
		{"unknown field in an event", `{"events":[{"sourceSystem":"s","extra":1}]}`, 400, "unknown_field"},
		{"events not an array", `{"events":{}}`, 400, "invalid_field"},
		{"too large", `{"events":[` + strings.Repeat(" ", 3<<20) + `]}`, 413, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, "POST", path+":batch", tt.body)
			if r.status != tt.status || !hasCode(r.body, tt.code) {
				t.Fatalf("got %d %.300s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if n := e.written(t); n != 0 {
				t.Fatalf("a refused batch wrote %d rows", n)
			}
		})
	}
	// 1,000 is allowed.
	var parts []string
	for i := range 1000 {
		parts = append(parts, usage{SourceSystem: "s", SourceEventID: fmt.Sprint(i), MeterCode: "api", Quantity: "1", OccurredAt: rfc(time.Now())}.json(t))
	}
	r := e.do(t, "POST", path+":batch", `{"events":[`+strings.Join(parts, ",")+`]}`)
	if r.status != 200 || strings.Count(r.body, `"status":201`) != 1000 {
		t.Fatalf("batch of 1000: %d %.300s", r.status, r.body)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := rfc(time.Now())
	ok := func(f func(u *usage)) string {
		u := usage{SourceSystem: "s", SourceEventID: "x", MeterCode: "api", Quantity: "1", OccurredAt: at}
		f(&u)
		return u.json(t)
	}
	tests := []struct {
		name, tenant, body string
		status             int
		code               string
	}{
		{"invalid tenant", "t%201", ok(func(*usage) {}), 400, "invalid_tenant_id"},
		{"malformed json", "t1", `{"sourceSystem":`, 400, "malformed_json"},
		{"empty body", "t1", ``, 400, "malformed_json"},
		{"array body", "t1", `[]`, 400, "malformed_json"},
		{"unknown field", "t1", `{"sourceSystem":"s","sourceEventId":"x","meterCode":"api","quantity":"1","occurredAt":"` + at + `","unit":"ms"}`, 400, "unknown_field"},
		{"missing sourceSystem", "t1", ok(func(u *usage) { u.SourceSystem = "" }), 400, "missing_field"},
		{"missing sourceEventId", "t1", ok(func(u *usage) { u.SourceEventID = "" }), 400, "missing_field"},
		{"missing meterCode", "t1", ok(func(u *usage) { u.MeterCode = "" }), 400, "missing_field"},
		{"missing quantity", "t1", ok(func(u *usage) { u.Quantity = nil }), 400, "missing_field"},
		{"missing occurredAt", "t1", ok(func(u *usage) { u.OccurredAt = "" }), 400, "missing_field"},
		{"sourceEventId with space", "t1", ok(func(u *usage) { u.SourceEventID = "a b" }), 400, "invalid_field"},
		{"sourceEventId too long", "t1", ok(func(u *usage) { u.SourceEventID = strings.Repeat("x", 257) }), 400, "invalid_field"},
		{"sourceSystem too long", "t1", ok(func(u *usage) { u.SourceSystem = strings.Repeat("x", 129) }), 400, "invalid_field"},
		{"sourceSystem not a string", "t1", `{"sourceSystem":1,"sourceEventId":"x","meterCode":"api","quantity":"1","occurredAt":"` + at + `"}`, 400, "invalid_field"},
		{"invalid meter code", "t1", ok(func(u *usage) { u.MeterCode = "api calls" }), 400, "invalid_meter_code"},
		{"negative quantity", "t1", ok(func(u *usage) { u.Quantity = "-1" }), 400, "invalid_quantity"},
		{"quantity with exponent", "t1", ok(func(u *usage) { u.Quantity = "1e3" }), 400, "invalid_quantity"},
		{"quantity not a number", "t1", ok(func(u *usage) { u.Quantity = "lots" }), 400, "invalid_quantity"},
		{"quantity as JSON number", "t1", ok(func(u *usage) { u.Quantity = 5 }), 400, "invalid_quantity"},
		{"quantity too many digits", "t1", ok(func(u *usage) { u.Quantity = strings.Repeat("9", 39) }), 400, "invalid_quantity"},
		{"quantity of 38 nines", "t1", ok(func(u *usage) { u.Quantity = strings.Repeat("9", 38) }), 400, "decimal_out_of_range"},
		{"quantity of 19 integer digits", "t1", ok(func(u *usage) { u.Quantity = "1" + strings.Repeat("0", 18) }), 400, "decimal_out_of_range"},
		{"quantity of 13 decimal places", "t1", ok(func(u *usage) { u.Quantity = "0." + strings.Repeat("0", 12) + "1" }), 400, "too_many_decimal_places"},
		{"unknown currency", "t1", ok(func(u *usage) { u.Currency = "ABC" }), 400, "unknown_currency"},
		{"occurredAt not RFC 3339", "t1", ok(func(u *usage) { u.OccurredAt = "2026-11-01 10:00" }), 400, "invalid_field"},
		{"occurredAt year 0", "t1", ok(func(u *usage) { u.OccurredAt = "0000-01-01T00:00:00Z" }), 400, "invalid_field"},
		{"occurredAt in the future", "t1", ok(func(u *usage) { u.OccurredAt = rfc(time.Now().Add(6 * time.Minute)) }), 422, "occurred_in_future"},
		{"unknown meter", "t1", ok(func(u *usage) { u.MeterCode = "voice" }), 422, "unknown_meter"},
		{"body too large", "t1", `{"sourceSystem":"` + strings.Repeat("s", 20<<10) + `"}`, 413, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/tenants/"+tt.tenant+"/usage", tt.body)
			if r.status != tt.status || !hasCode(r.body, tt.code) {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("content type %q", ct)
			}
			if n := e.written(t); n != 0 {
				t.Fatalf("bad input wrote %d rows", n)
			}
		})
	}
}

func TestGetUsage(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	r := e.do(t, "POST", path, usage{SourceSystem: "gw", SourceEventID: "e1", MeterCode: "api", Quantity: "0.25", OccurredAt: rfc(at)}.json(t))
	if r.status != 201 {
		t.Fatalf("accept: %d %s", r.status, r.body)
	}
	a := decode[accepted](t, r.body)
	g := e.do(t, "GET", path+"/"+a.UsageID, "")
	if g.status != 200 {
		t.Fatalf("get: %d %s", g.status, g.body)
	}
	f := decode[map[string]any](t, g.body)
	want := map[string]any{
		"usageId": a.UsageID, "tenantId": "t1", "sourceSystem": "gw", "sourceEventId": "e1", "meterCode": "api",
		"quantity": "0.25", "occurredAt": rfc(at), "currency": "USD", "eventId": a.EventID,
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %v, want %v", k, f[k], v)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(f["acceptedAt"])); err != nil || !strings.HasSuffix(fmt.Sprint(f["acceptedAt"]), "Z") {
		t.Errorf("acceptedAt %v", f["acceptedAt"])
	}
	for _, p := range []string{
		path + "/0190c6a0-0000-7000-8000-000000000000", // unknown
		"/v1/tenants/t2/usage/" + a.UsageID,            // another tenant's
		path + "/not-a-uuid",
		path + "/%7B" + a.UsageID + "%7D", // other spellings of the fact's id
		path + "/urn:uuid:" + a.UsageID,
		path + "/" + strings.ReplaceAll(a.UsageID, "-", ""),
	} {
		if g := e.do(t, "GET", p, ""); g.status != 404 || !hasCode(g.body, "not_found") {
			t.Errorf("GET %s: %d %s, want 404 not_found", p, g.status, g.body)
		}
	}
}

func TestDatabaseUnavailable(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	log := slog.New(slog.DiscardHandler)
	router := chi.NewRouter()
	router.Use(authtest.SignedIn("ingest@acme.example", "ingest"))
	httpapi.New(app.New(app.Deps{Pool: pool, Logger: log}, app.Config{}), log).Routes(router)
	srv := httptest.NewServer(apitest.Handler(t, usageapi.YAML(), router))
	t.Cleanup(srv.Close)
	e := &env{srv: srv}
	body := usage{SourceSystem: "s", SourceEventID: "x", MeterCode: "api", Quantity: "1", OccurredAt: rfc(time.Now())}.json(t)
	for _, p := range []string{path, path + ":batch"} {
		b := body
		if strings.HasSuffix(p, ":batch") {
			b = `{"events":[` + body + `]}`
		}
		if r := e.do(t, "POST", p, b); r.status != http.StatusServiceUnavailable || !hasCode(r.body, "database_unavailable") {
			t.Fatalf("POST %s: %d %s, want 503 database_unavailable", p, r.status, r.body)
		}
	}
	if r := e.do(t, "GET", path+"/0190c6a0-0000-7000-8000-000000000000", ""); r.status != http.StatusServiceUnavailable {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
}
