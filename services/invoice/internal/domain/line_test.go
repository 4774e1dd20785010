package domain

import (
	"maps"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/pricing"
)

// A dimensions key is canonical (names in order) and decodes back to its
// set, whatever the values hold.
func TestDimensionsKey(t *testing.T) {
	for _, dims := range []map[string]string{
		nil,
		{"model": "gpt-4"},
		{"region": "eu", "model": "gpt-4"},
		{"model": "a&b=c/d %", "z.y-x_1": "ü 東京"},
	} {
		key := DimensionsKey(dims)
		plan, back, err := ParseDimensionsKey(key)
		if err != nil || plan != "" || !maps.Equal(back, dims) || (len(dims) == 0) != (key == "") {
			t.Fatalf("DimensionsKey(%v) = %q, back %q %v, %v", dims, key, plan, back, err)
		}
		// A plan's charge of the same dimensions is another line.
		pkey := LineKey("pro", dims)
		plan, back, err = ParseDimensionsKey(pkey)
		if err != nil || plan != "pro" || !maps.Equal(back, dims) || pkey == key {
			t.Fatalf("LineKey(pro, %v) = %q, back %q %v, %v", dims, pkey, plan, back, err)
		}
	}
	if got := DimensionsKey(map[string]string{"region": "eu", "model": "gpt-4"}); got != "model=gpt-4&region=eu" {
		t.Fatalf("key %q, want names in order", got)
	}
	if got := LineID("tokens", 3, "model=gpt-4", false); got != "charge/tokens/3/model=gpt-4" {
		t.Fatalf("line id %q", got)
	}
	if got, old := LineID("tokens", 3, "", false), ChargeLineID("tokens", 3); got != old {
		t.Fatalf("line id %q, want %q as before dimensions", got, old)
	}
	if got := LineID("tokens", 0, "", true); got != "unpriced/tokens" {
		t.Fatalf("unpriced line id %q", got)
	}
}

// A group's quantity is its aggregation; its amount the charges' under
// unit pricing of sum and count, else the pricing over the quantity.
func TestGroupPrice(t *testing.T) {
	d := decimal.RequireFromString
	fig := d("12")
	unit := pricing.UnitPricing(d("2"))
	size, price := d("10"), d("3")
	pkg := pricing.Pricing{Model: pricing.Package, PackageSize: &size, PackagePrice: &price}
	tests := []struct {
		name         string
		g            Group
		qty, amount  string
		wantErr, chk bool
	}{
		{"old-style sum", Group{UnitPrice: d("2"), ChargeCount: 2, Sum: d("5"), Amount: d("10")}, "5", "10", false, true},
		{"count", Group{Aggregation: "count", UnitPrice: d("2"), ChargeCount: 3, Sum: d("30"), Amount: d("6")}, "3", "6", false, true},
		{"count, an amount off", Group{Aggregation: "count", UnitPrice: d("2"), ChargeCount: 3, Sum: d("3"), Amount: d("5")}, "", "", true, true},
		{"sum with unit pricing carried", Group{Aggregation: "sum", UnitPrice: d("2"), ChargeCount: 1, Sum: d("5"), Amount: d("10"), Pricing: &unit}, "5", "10", false, true},
		{"sum under package", Group{Aggregation: "sum", ChargeCount: 2, Sum: d("21"), Pricing: &pkg}, "21", "9", false, true},
		{"max under unit", Group{Aggregation: "max", ChargeCount: 4, Sum: d("40"), Figure: &fig, Pricing: &unit}, "12", "24", false, true},
		{"latest without a figure", Group{Aggregation: "latest", ChargeCount: 1, Pricing: &unit}, "", "", true, false},
		{"unique_count under package", Group{Aggregation: "unique_count", ChargeCount: 50, Distinct: 11, Pricing: &pkg}, "11", "6", false, true},
		{"max without pricing", Group{Aggregation: "max", ChargeCount: 1, Figure: &fig}, "", "", true, false},
		{"max with amounts", Group{Aggregation: "max", ChargeCount: 1, Figure: &fig, Pricing: &unit, Amount: d("1")}, "", "", true, true},
		{"unpriced max", Group{Unpriced: true, Aggregation: "max", ChargeCount: 2, Figure: &fig}, "12", "0", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := tt.g.Price(tt.chk)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("priced %+v, want an error", l)
				}
				return
			}
			if err != nil || !l.Quantity.Equal(d(tt.qty)) || !l.Amount.Equal(d(tt.amount)) {
				t.Fatalf("Price = %+v, %v; want %s, %s", l, err, tt.qty, tt.amount)
			}
		})
	}
}
