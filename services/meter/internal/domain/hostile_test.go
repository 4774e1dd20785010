package domain

import (
	"testing"
	"time"
)

// Lenient effectiveAt values are refused: the zero time (which would read
// as "absent", so "now"), year 9999 and anything more than
// MaxScheduleAhead after the activation; and a signed zero price.
func TestActivationRefusesLenientValues(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	req := func(eff, price string) Request {
		return Request{MeterCode: "api", Currency: "USD", UnitPrice: price, EffectiveAt: eff}
	}
	for _, tc := range []struct {
		name string
		r    Request
		want string
	}{
		{"zero time", req("0001-01-01T00:00:00Z", "1"), CodeInvalidField},
		{"year 9999", req("9999-12-31T23:59:59Z", "1"), CodeInvalidField},
		{"year 1969", req("1969-12-31T23:59:59Z", "1"), CodeInvalidField},
		{"more than ten years ahead", req("2037-01-01T00:00:00Z", "1"), CodeEffectiveTooFar},
		{"signed zero price", req("", "-0"), CodeInvalidPrice},
		{"signed zero price with a fraction", req("", "-0.00"), CodeInvalidPrice},
		{"XXX", Request{MeterCode: "api", Currency: "XXX", UnitPrice: "1"}, "currency_not_invoiceable"},
		{"XTS", Request{MeterCode: "api", Currency: "XTS", UnitPrice: "1"}, "currency_not_invoiceable"},
		{"a year ahead", req("2027-11-30T12:00:00Z", "1"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseActivation(tc.r)
			if err == nil {
				_, err = a.Schedule(now, nil, nil)
			}
			if got := code(err); got != tc.want {
				t.Fatalf("code %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// FuzzParseActivation: the pricing model input as sent; whatever it holds,
// an accepted activation has a valid pricing and an effectiveAt that is
// zero (absent) or within the years allowed.
func FuzzParseActivation(f *testing.F) {
	f.Add("api", "USD", "", "1.5", "", "", "", "", "")
	f.Add("api", "USD", "graduated", "", "2026-12-01T00:00:00Z", "1000", "0", "", "")
	f.Add("api", "EUR", "package", "", "", "", "", "100", "5")
	f.Add("api", "XXX", "unit", "-0", "0001-01-01T00:00:00Z", "", "", "", "")
	f.Add("a\x00", "USD", "volume", "1e9", "9999-12-31T23:59:59Z", "-1", "1", "0", "0")
	f.Fuzz(func(t *testing.T, meter, currency, model, unitPrice, eff, upTo, tierPrice, pkgSize, pkgPrice string) {
		r := Request{MeterCode: meter, Currency: currency, Model: model, UnitPrice: unitPrice, EffectiveAt: eff,
			PackageSize: pkgSize, PackagePrice: pkgPrice}
		if upTo != "" || tierPrice != "" {
			r.Tiers = []TierRequest{{UpTo: upTo, UnitPrice: tierPrice}, {UnitPrice: tierPrice}}
		}
		a, err := ParseActivation(r)
		if err != nil {
			if code(err) == "" || code(err)[0] == '?' {
				t.Fatalf("an error without a code: %v", err)
			}
			return
		}
		if err := a.Pricing.Validate(); err != nil {
			t.Fatalf("accepted an invalid pricing: %v", err)
		}
		if !a.EffectiveAt.IsZero() {
			if y := a.EffectiveAt.Year(); y < MinYear || y > MaxYear {
				t.Fatalf("accepted effectiveAt %v", a.EffectiveAt)
			}
		}
	})
}
