package money

import (
	"testing"

	"github.com/shopspring/decimal"
)

func bound(s string) *decimal.Decimal { d := dec(s); return &d }

// The model's own arithmetic, against the figures docs/money.md and the
// decisions state.
func TestModelArithmetic(t *testing.T) {
	demo := Pricing{Model: Graduated, Tiers: []Tier{
		{UpTo: bound("1000"), UnitPrice: dec("0")},
		{UpTo: bound("10000"), UnitPrice: dec("0.002"), FlatFee: dec("1")},
		{UnitPrice: dec("0.001")},
	}}
	volume := Pricing{Model: Volume, Tiers: []Tier{{UpTo: bound("100"), UnitPrice: dec("1.00")}, {UnitPrice: dec("0.50")}}}
	pkg := Pricing{Model: Package, PackageSize: dec("100"), PackagePrice: dec("2.50")}
	for _, tc := range []struct {
		name string
		got  decimal.Decimal
		want string
	}{
		{"unit", Pricing{Model: Unit, UnitPrice: dec("0.0015")}.Amount(dec("1203.5")), "1.80525"},
		{"graduated demo", demo.Amount(dec("12006")), "21.006"},
		{"graduated at a bound: the next tier is not reached", demo.Amount(dec("1000")), "0"},
		{"graduated just past a bound: its flat fee", demo.Amount(dec("1000.5")), "1.001"},
		{"graduated zero", demo.Amount(decimal.Zero), "0"},
		{"volume at its bound", volume.Amount(dec("100")), "100"},
		{"volume past it: every unit cheaper", volume.Amount(dec("101")), "50.5"},
		{"volume floor: just past the bound", volume.Floor(dec("100")), "50.0000000000005"},
		{"volume floor in the open tier", volume.Floor(dec("101")), "50.5"},
		{"package: a started package counts", pkg.Amount(dec("300.000000000001")), "10"},
		{"package: whole packages", pkg.Amount(dec("300")), "7.5"},
		{"round half-even down", roundTotal(dec("0.125"), "USD"), "0.12"},
		{"round half-even up", roundTotal(dec("0.135"), "USD"), "0.14"},
		{"round negative", roundTotal(dec("-0.125"), "USD"), "-0.12"},
		{"round KRW", roundTotal(dec("19833.75"), "KRW"), "19834"},
		{"round BHD", roundTotal(dec("1.0005"), "BHD"), "1"},
		{"round JPY half", roundTotal(dec("2.5"), "JPY"), "2"},
		{"floor minor", floorMinor(dec("-0.005"), "USD"), "-0.01"},
		{"tax of the rounded subtotal, half-even", taxLines([]TaxRate{{Rate: dec("0.25")}}, dec("1002.5"), dec("1002"), "KRW")[0].Amount, "250"},
		{"tax in BHD, half-even", taxLines([]TaxRate{{Rate: dec("0.125")}}, dec("2.0035"), dec("2.004"), "BHD")[0].Amount, "0.25"},
	} {
		if !tc.got.Equal(dec(tc.want)) {
			t.Errorf("%s: got %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	if wholeMinor(dec("-0.005"), "USD") || !wholeMinor(dec("1.50"), "USD") || wholeMinor(dec("0.5"), "KRW") {
		t.Error("wholeMinor")
	}
}
