package domain

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/rule"
)

var now = time.Date(2026, 11, 5, 12, 0, 0, 0, time.UTC)

func TestParse(t *testing.T) {
	ok := Request{SourceSystem: "gw", SourceEventID: "e-1", MeterCode: "api", Quantity: "1.5", OccurredAt: "2026-11-05T11:00:00Z"}
	with := func(f func(r *Request)) Request { r := ok; f(&r); return r }
	tests := []struct {
		name string
		req  Request
		code string
	}{
		{"ok", ok, ""},
		{"ok with currency", with(func(r *Request) { r.Currency = "KRW" }), ""},
		{"ok with offset", with(func(r *Request) { r.OccurredAt = "2026-11-05T20:00:00+09:00" }), ""},
		{"ok 5 minutes ahead", with(func(r *Request) { r.OccurredAt = "2026-11-05T12:05:00Z" }), ""},
		{"zero quantity", with(func(r *Request) { r.Quantity = "0" }), ""},
		{"missing source system", with(func(r *Request) { r.SourceSystem = "" }), CodeMissingField},
		{"missing source event", with(func(r *Request) { r.SourceEventID = "" }), CodeMissingField},
		{"missing meter", with(func(r *Request) { r.MeterCode = "" }), CodeMissingField},
		{"missing quantity", with(func(r *Request) { r.Quantity = "" }), CodeMissingField},
		{"missing occurredAt", with(func(r *Request) { r.OccurredAt = "" }), CodeMissingField},
		{"control char in id", with(func(r *Request) { r.SourceEventID = "a\nb" }), CodeInvalidField},
		{"non-ASCII id", with(func(r *Request) { r.SourceSystem = "gé" }), CodeInvalidField},
		{"long id", with(func(r *Request) { r.SourceEventID = strings.Repeat("x", MaxSourceEventID+1) }), CodeInvalidField},
		{"bad meter", with(func(r *Request) { r.MeterCode = "a|b" }), CodeInvalidMeterCode},
		{"negative", with(func(r *Request) { r.Quantity = "-0.1" }), CodeInvalidQuantity},
		{"plus sign", with(func(r *Request) { r.Quantity = "+1" }), CodeInvalidQuantity},
		{"leading zero", with(func(r *Request) { r.Quantity = "01" }), CodeInvalidQuantity},
		{"currency", with(func(r *Request) { r.Currency = "US" }), CodeUnknownCurrency},
		{"time", with(func(r *Request) { r.OccurredAt = "yesterday" }), CodeInvalidField},
		{"future", with(func(r *Request) { r.OccurredAt = "2026-11-05T12:05:00.000001Z" }), CodeOccurredInFuture},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.req, now)
			got := ""
			if err != nil {
				got = err.Code
			}
			if got != tt.code {
				t.Fatalf("code %q, want %q (%v)", got, tt.code, err)
			}
		})
	}
	u, err := Parse(with(func(r *Request) { r.OccurredAt = "2026-11-05T20:00:00.1234567+09:00" }), now)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 5, 11, 0, 0, 123456000, time.UTC); !u.OccurredAt.Equal(want) || u.OccurredAt.Location() != time.UTC {
		t.Fatalf("occurredAt %v, want %v in UTC", u.OccurredAt, want)
	}
}

// Usage picks the currency and refuses what it can refuse for sure; the
// version is the rater's (decision 0011), and a fact before its series'
// first version is the rater's to rate unpriced (section 3a). A catalog
// meter the tenant has no price for yet has no currency: refused.
func TestCurrency(t *testing.T) {
	t0 := now.Add(-10 * time.Hour)
	ev := NewEvidence([]PriceVersion{
		{MeterCode: "api", Currency: "USD", Version: 3, EffectiveAt: t0.Add(2 * time.Hour)},
		{MeterCode: "api", Currency: "USD", Version: 1, EffectiveAt: t0},
		{MeterCode: "api", Currency: "USD", Version: 2, EffectiveAt: t0.Add(2 * time.Hour)},
		{MeterCode: "sms", Currency: "USD", Version: 1, EffectiveAt: t0},
		{MeterCode: "sms", Currency: "KRW", Version: 1, EffectiveAt: t0.Add(time.Hour)},
	})
	cat := NewCatalog([]catalog.Meter{
		{Code: "seats", Name: "Seats", Aggregation: catalog.Max},
		{Code: "api", Name: "API calls", Aggregation: catalog.Sum},
	})
	tests := []struct {
		name, meter, currency string
		at                    time.Time
		wantCurrency          string
		code                  string
	}{
		{"first version from its start", "api", "", t0, "USD", ""},
		{"later", "api", "USD", now, "USD", ""},
		{"before the first version", "api", "", t0.Add(-time.Microsecond), "USD", ""},
		{"unknown meter", "voice", "", now, "", CodeUnknownMeter},
		{"catalog meter without a price", "seats", "", now, "", CodeNoPriceInEffect},
		{"catalog meter without a price, currency named", "seats", "USD", now, "USD", ""},
		{"catalog meter priced", "api", "", now, "USD", ""},
		{"catalog meter, currency not priced", "api", "EUR", now, "EUR", ""},
		{"currency not priced, meter not in the catalog", "sms", "EUR", now, "", CodeUnknownMeter},
		{"several currencies", "sms", "", now, "", CodeCurrencyRequired},
		{"named currency", "sms", "KRW", now, "KRW", ""},
		{"named currency not yet in effect", "sms", "KRW", t0, "KRW", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur, err := ev.Currency(Usage{MeterCode: tt.meter, Currency: tt.currency, OccurredAt: tt.at}, cat)
			got := ""
			if err != nil {
				got = err.Code
				if err.Kind != rule.Unprocessable {
					t.Fatalf("kind %v, want Unprocessable", err.Kind)
				}
			}
			if got != tt.code || cur != tt.wantCurrency {
				t.Fatalf("got %q %q, want %q %q", cur, got, tt.wantCurrency, tt.code)
			}
		})
	}
}

func TestReplays(t *testing.T) {
	f := Fact{MeterCode: "api", Quantity: decimal.RequireFromString("1.50"), OccurredAt: now, Currency: "USD"}
	u := Usage{MeterCode: "api", Quantity: decimal.RequireFromString("1.5"), OccurredAt: now}
	tests := []struct {
		name string
		mod  func(u *Usage)
		want bool
	}{
		{"same", func(*Usage) {}, true},
		{"same with currency", func(u *Usage) { u.Currency = "USD" }, true},
		{"same instant in another zone", func(u *Usage) { u.OccurredAt = now.In(time.FixedZone("KST", 9*3600)) }, true},
		{"other quantity", func(u *Usage) { u.Quantity = decimal.RequireFromString("1.51") }, false},
		{"other time", func(u *Usage) { u.OccurredAt = now.Add(time.Microsecond) }, false},
		{"other meter", func(u *Usage) { u.MeterCode = "sms" }, false},
		{"other currency", func(u *Usage) { u.Currency = "EUR" }, false},
		{"no properties and {}", func(u *Usage) { u.Properties = map[string]string{} }, true},
		{"other properties", func(u *Usage) { u.Properties = map[string]string{"model": "gpt-4"} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := u
			tt.mod(&x)
			if got := x.Replays(f); got != tt.want {
				t.Fatalf("Replays = %v, want %v", got, tt.want)
			}
		})
	}
}
