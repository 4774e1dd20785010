package domain

import (
	"testing"
	"time"
)

// Lenient usage values are refused: the zero time and far years as
// occurredAt, a signed zero quantity, XXX and XTS as the currency.
func TestParseRefusesLenientValues(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ok := Request{SourceSystem: "s", SourceEventID: "e1", MeterCode: "api", Quantity: "1", OccurredAt: "2026-11-30T11:00:00Z"}
	for _, tc := range []struct {
		name string
		edit func(*Request)
		want string
	}{
		{"zero time", func(r *Request) { r.OccurredAt = "0001-01-01T00:00:00Z" }, CodeInvalidField},
		{"year 1969", func(r *Request) { r.OccurredAt = "1969-12-31T23:59:59Z" }, CodeInvalidField},
		{"signed zero", func(r *Request) { r.Quantity = "-0" }, CodeInvalidQuantity},
		{"signed zero with a fraction", func(r *Request) { r.Quantity = "-0.000" }, CodeInvalidQuantity},
		{"XXX", func(r *Request) { r.Currency = "XXX" }, "currency_not_invoiceable"},
		{"XTS", func(r *Request) { r.Currency = "XTS" }, "currency_not_invoiceable"},
		{"ok", func(*Request) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			_, err := Parse(r, now)
			got := ""
			if err != nil {
				got = err.Code
			}
			if got != tc.want {
				t.Fatalf("code %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// FuzzParse: an accepted usage fact has a non-negative quantity, an
// occurredAt within the allowed years and not in the future past the skew.
func FuzzParse(f *testing.F) {
	f.Add("s", "e1", "api", "1.5", "2026-11-30T11:00:00Z", "")
	f.Add("s", "e1", "api", "-0", "0001-01-01T00:00:00Z", "XXX")
	f.Add("s\x00", "e 1", "a\xff", "1e9", "9999-12-31T23:59:59Z", "usd")
	f.Fuzz(func(t *testing.T, system, event, meter, qty, at, currency string) {
		now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		u, err := Parse(Request{SourceSystem: system, SourceEventID: event, MeterCode: meter, Quantity: qty, OccurredAt: at, Currency: currency}, now)
		if err != nil {
			if err.Code == "" {
				t.Fatalf("an error without a code: %v", err)
			}
			return
		}
		if u.Quantity.IsNegative() || u.OccurredAt.Year() < MinYear || u.OccurredAt.After(now.Add(MaxFutureSkew)) {
			t.Fatalf("accepted %+v", u)
		}
	})
}
