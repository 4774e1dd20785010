package domain

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/pricing"
)

// A charge line's amount is its version's pricing over the line's quantity,
// under every model.
func TestLineAmountPerModel(t *testing.T) {
	dec := decimal.RequireFromString
	upTo := func(s string) *decimal.Decimal { v := dec(s); return &v }
	tiers := []pricing.Tier{
		{UpTo: upTo("1000"), UnitPrice: dec("0"), FlatFee: dec("0")}, // a free allowance
		{UpTo: upTo("5000"), UnitPrice: dec("0.002"), FlatFee: dec("1")},
		{UnitPrice: dec("0.001"), FlatFee: dec("0")},
	}
	tests := []struct {
		name     string
		p        Pricing
		quantity string
		want     string
	}{
		{"unit", Pricing{Model: ModelUnit, UnitPrice: dec("0.0125")}, "1000.5", "12.50625"},
		{"graduated inside the allowance", Pricing{Model: ModelGraduated, Tiers: tiers}, "999", "0"},
		{"graduated over two tiers", Pricing{Model: ModelGraduated, Tiers: tiers}, "6000", "10"}, // 0 + 4000 x 0.002 + 1 + 1000 x 0.001
		{"volume", Pricing{Model: ModelVolume, Tiers: tiers}, "6000", "6"},
		{"volume in the second tier", Pricing{Model: ModelVolume, Tiers: tiers}, "2000", "5"},
		{"package", Pricing{Model: ModelPackage, PackageSize: dec("1000"), PackagePrice: dec("1.5")}, "2001", "4.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LineAmount(tt.p, dec(tt.quantity))
			if err != nil || !got.Equal(dec(tt.want)) {
				t.Fatalf("LineAmount = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	if _, err := LineAmount(Pricing{Model: ModelPackage, PackageSize: dec("0"), PackagePrice: dec("1")}, dec("1")); err == nil {
		t.Fatal("a package of size 0 priced a line")
	}
}
