package domain

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestIssueRoundsOnceHalfEven(t *testing.T) {
	tests := []struct {
		subtotal, currency, total, rounding string
	}{
		{"1234.5", "KRW", "1234", "-0.5"}, // tie, to even (down)
		{"1235.5", "KRW", "1236", "0.5"},  // tie, to even (up)
		{"1234.51", "KRW", "1235", "0.49"},
		{"1000", "KRW", "1000", "0"},
		{"10.125", "USD", "10.12", "-0.005"}, // tie, to even (down)
		{"10.135", "USD", "10.14", "0.005"},  // tie, to even (up)
		{"10.1251", "USD", "10.13", "0.0049"},
		{"-10.125", "USD", "-10.12", "0.005"},
		{"3.50", "USD", "3.5", "0"},
		{"0.0001", "JPY", "0", "-0.0001"},
		{"1.0005", "BHD", "1", "-0.0005"}, // 3 decimals, tie to even
	}
	for _, tt := range tests {
		t.Run(tt.currency+" "+tt.subtotal, func(t *testing.T) {
			a, err := Issue(d(tt.subtotal), tt.currency, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !a.Total.Equal(d(tt.total)) || !a.Rounding.Equal(d(tt.rounding)) || !a.Subtotal.Equal(d(tt.subtotal)) {
				t.Fatalf("Issue(%s %s) = total %s rounding %s, want %s and %s",
					tt.subtotal, tt.currency, a.Total, a.Rounding, tt.total, tt.rounding)
			}
			if !a.Subtotal.Add(a.Rounding).Equal(a.Total) {
				t.Fatalf("subtotal + rounding != total")
			}
		})
	}
	if _, err := Issue(d("1"), "XYZ", nil); err == nil {
		t.Fatal("Issue with an unknown currency: want an error")
	}
}

// Taxes come after the rounding: each rate times the subtotal rounded to
// the minor unit, each rounded half-even; the total is the rounded subtotal
// plus the taxes. Currencies of exponent 0, 2 and 3.
func TestIssueTaxesTheRoundedSubtotal(t *testing.T) {
	vat := events.TaxRate{Code: "VAT", Name: "VAT", Rate: d("0.1")}
	local := events.TaxRate{Code: "LOCAL", Name: "Local", Rate: d("0.075")}
	tests := []struct {
		subtotal, currency string
		rates              []events.TaxRate
		taxes              []string
		taxTotal, total    string
	}{
		// KRW 1234.5 rounds to 1234 (to even); 10% = 123.4 -> 123; 7.5% =
		// 92.55 -> 93.
		{"1234.5", "KRW", []events.TaxRate{vat, local}, []string{"123", "93"}, "216", "1450"},
		// 1235.5 rounds to 1236 (to even); 10% = 123.6 -> 124; 7.5% = 92.7 -> 93.
		{"1235.5", "KRW", []events.TaxRate{vat, local}, []string{"124", "93"}, "217", "1453"},
		// USD 10.125 rounds to 10.12; 10% = 1.012 -> 1.01; 7.5% = 0.759 -> 0.76.
		{"10.125", "USD", []events.TaxRate{vat, local}, []string{"1.01", "0.76"}, "1.77", "11.89"},
		// USD 0.25 exactly: 10% = 0.025, a tie, to even: 0.02.
		{"0.25", "USD", []events.TaxRate{vat}, []string{"0.02"}, "0.02", "0.27"},
		// USD 0.045 rounds to 0.04 (to even); 7.5% = 0.003 -> 0.
		{"0.045", "USD", []events.TaxRate{local}, []string{"0"}, "0", "0.04"},
		// BHD (3 decimals): 1.0005 rounds to 1.000; 7.5% = 0.075.
		{"1.0005", "BHD", []events.TaxRate{local}, []string{"0.075"}, "0.075", "1.075"},
		// The order matters: KRW 105.4 rounds to 105; 10% = 10.5, a tie, to
		// even: 10. Taxed before rounding it would be 10.54 -> 11.
		{"105.4", "KRW", []events.TaxRate{vat}, []string{"10"}, "10", "115"},
		{"10", "USD", nil, nil, "0", "10"},
	}
	for _, tt := range tests {
		t.Run(tt.currency+" "+tt.subtotal, func(t *testing.T) {
			a, err := Issue(d(tt.subtotal), tt.currency, tt.rates)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Taxes) != len(tt.taxes) {
				t.Fatalf("%d tax lines, want %d", len(a.Taxes), len(tt.taxes))
			}
			for i, want := range tt.taxes {
				if l := a.Taxes[i]; !l.Amount.Equal(d(want)) || l.Code != tt.rates[i].Code || !l.Rate.Equal(tt.rates[i].Rate) {
					t.Errorf("tax %d = %s %s %s, want %s %s", i, l.Code, l.Rate, l.Amount, tt.rates[i].Code, want)
				}
			}
			if !a.TaxTotal.Equal(d(tt.taxTotal)) || !a.Total.Equal(d(tt.total)) {
				t.Errorf("tax total %s total %s, want %s and %s", a.TaxTotal, a.Total, tt.taxTotal, tt.total)
			}
			if !a.Subtotal.Add(a.Rounding).Add(a.TaxTotal).Equal(a.Total) {
				t.Errorf("subtotal + rounding + taxes != total")
			}
		})
	}
}

func TestCheckClose(t *testing.T) {
	usd := Tally{Charges: 2, ChargeAmount: d("10.005"), ChargeDigest: "300", Adjustments: 1, AdjustmentAmount: d("-1"), AdjustmentDigest: "7"}
	krw := Tally{Charges: 1, ChargeAmount: d("100.5"), ChargeDigest: "12", AdjustmentDigest: "0"}
	have := map[string]Tally{"USD": usd, "KRW": krw}
	with := func(cur string, edit func(*Tally)) map[string]Tally {
		out := map[string]Tally{"USD": usd, "KRW": krw}
		t := out[cur]
		edit(&t)
		out[cur] = t
		return out
	}
	tests := []struct {
		name       string
		want, have map[string]Tally
		err        any // nil, or a pointer to the wanted error type
	}{
		{"complete", have, have, nil},
		{"equal amounts written differently", with("USD", func(t *Tally) { t.ChargeAmount = d("10.0050") }), have, nil},
		{"nothing to issue", map[string]Tally{}, nil, nil},
		{"empty currency without invoice", with("EUR", func(t *Tally) { t.ChargeDigest, t.AdjustmentDigest = "0", "0" }), have, nil},
		{"charge missing", with("USD", func(t *Tally) { t.Charges = 3 }), have, new(*IncompleteError)},
		{"adjustment missing", with("KRW", func(t *Tally) { t.Adjustments = 1 }), have, new(*IncompleteError)},
		{"nothing here yet", have, nil, new(*IncompleteError)},
		{"more charges than counted", with("USD", func(t *Tally) { t.Charges = 1 }), have, new(*CountsMismatchError)},
		{"more in one currency, fewer in another", with("USD", func(t *Tally) { t.Charges = 1 }),
			with("KRW", func(t *Tally) { t.Charges = 0 }), new(*CountsMismatchError)},
		{"a currency the close did not count", map[string]Tally{"USD": usd}, have, new(*CountsMismatchError)},
		{"same count, other charges", with("USD", func(t *Tally) { t.ChargeDigest = "301" }), have, new(*DigestMismatchError)},
		{"same count, other adjustments", with("USD", func(t *Tally) { t.AdjustmentDigest = "8" }), have, new(*DigestMismatchError)},
		{"a digest that is no integer", with("USD", func(t *Tally) { t.ChargeDigest = "x" }), have, new(*DigestMismatchError)},
		{"digest mismatch wins over waiting", with("USD", func(t *Tally) { t.ChargeDigest = "301" }),
			with("KRW", func(t *Tally) { t.Charges, t.ChargeDigest = 0, "0" }), new(*DigestMismatchError)},
		{"same charges, other amount", with("USD", func(t *Tally) { t.ChargeAmount = d("10.01") }), have, new(*TotalsMismatchError)},
		{"same adjustments, other amount", with("USD", func(t *Tally) { t.AdjustmentAmount = d("-2") }), have, new(*TotalsMismatchError)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckClose(tt.want, tt.have)
			switch want := tt.err.(type) {
			case nil:
				if err != nil {
					t.Fatalf("CheckClose: %v, want nil", err)
				}
			case **IncompleteError:
				if !errors.As(err, want) {
					t.Fatalf("CheckClose: %v, want *IncompleteError", err)
				}
			case **CountsMismatchError:
				if !errors.As(err, want) {
					t.Fatalf("CheckClose: %v, want *CountsMismatchError", err)
				}
			case **DigestMismatchError:
				if !errors.As(err, want) {
					t.Fatalf("CheckClose: %v, want *DigestMismatchError", err)
				}
			case **TotalsMismatchError:
				if !errors.As(err, want) {
					t.Fatalf("CheckClose: %v, want *TotalsMismatchError", err)
				}
			}
		})
	}
}

func TestLineAmount(t *testing.T) {
	unit := Pricing{Model: ModelUnit, UnitPrice: d("0.0125")}
	got, err := LineAmount(unit, d("1000.5"))
	if err != nil || !got.Equal(d("12.50625")) {
		t.Fatalf("LineAmount(unit 0.0125, 1000.5) = %s, %v; want 12.50625", got, err)
	}
	if _, err := LineAmount(Pricing{Model: "graduated"}, d("1")); err == nil {
		t.Fatal("LineAmount under a model invoice does not price: want an error")
	}
	if err := CheckLine("charge/api_calls/1", unit, d("1000.5"), d("12.50625")); err != nil {
		t.Fatalf("CheckLine of a line whose charges sum to its amount: %v", err)
	}
	var mismatch *LineAmountMismatchError
	if err := CheckLine("charge/api_calls/1", unit, d("1000.5"), d("12.51")); !errors.As(err, &mismatch) {
		t.Fatalf("CheckLine with charges summing to another amount: %v, want *LineAmountMismatchError", err)
	}
}

func TestLineIDs(t *testing.T) {
	id := uuid.MustParse("0190f0a4-0000-7000-8000-000000000001")
	for got, want := range map[string]string{
		ChargeLineID("api_calls", 3): "charge/api_calls/3",
		AdjustmentLineID(id):         "adjustment/0190f0a4-0000-7000-8000-000000000001",
		RoundingLineID:               "rounding",
	} {
		if got != want {
			t.Errorf("line id %q, want %q", got, want)
		}
	}
}
