package pricing

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/shopspring/decimal"
	"pgregory.net/rapid"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }
func dp(s string) *decimal.Decimal {
	v := d(s)
	return &v
}

// tiers builds tiers from (upTo, unitPrice, flatFee) triples; upTo "" is
// open.
func tiers(ts ...[3]string) []Tier {
	out := make([]Tier, len(ts))
	for i, t := range ts {
		out[i] = Tier{UnitPrice: d(t[1]), FlatFee: d(t[2])}
		if t[0] != "" {
			out[i].UpTo = dp(t[0])
		}
	}
	return out
}

func TestAmount(t *testing.T) {
	// 100 free, 101-1000 at 0.01, then 0.005, 5.00 on reaching the third tier.
	grad := Pricing{Model: Graduated, Tiers: tiers([3]string{"100", "0", "0"}, [3]string{"1000", "0.01", "0"}, [3]string{"", "0.005", "5"})}
	// Flat fees on every tier.
	gradFees := Pricing{Model: Graduated, Tiers: tiers([3]string{"10", "1", "2"}, [3]string{"", "0.5", "3"})}
	vol := Pricing{Model: Volume, Tiers: tiers([3]string{"100", "0.10", "0"}, [3]string{"1000", "0.08", "1"}, [3]string{"", "0.05", "2"})}
	pkg := Pricing{Model: Package, PackageSize: dp("100"), PackagePrice: dp("2.50")}
	tests := []struct {
		name string
		p    Pricing
		q    string
		want string
	}{
		{"unit", UnitPricing(d("0.0015")), "1203.5", "1.80525"},
		{"unit zero", UnitPricing(d("0.0015")), "0", "0"},
		{"graduated inside the free tier", grad, "100", "0"},
		{"graduated one unit into the second tier", grad, "101", "0.01"},
		{"graduated at the second tier's bound", grad, "1000", "9"},
		{"graduated into the third tier", grad, "1500", "16.5"}, // 0 + 9 + 500 x 0.005 + 5
		{"graduated fractional", grad, "100.5", "0.005"},
		{"graduated zero reaches no tier", gradFees, "0", "0"},
		{"graduated first tier fee", gradFees, "4", "6"},           // 4 x 1 + 2
		{"graduated both fees", gradFees, "12", "16"},              // 10 x 1 + 2 + 2 x 0.5 + 3
		{"graduated just past a bound", gradFees, "10.1", "15.05"}, // 10 + 2 + 0.05 + 3
		{"volume first tier", vol, "100", "10"},
		{"volume second tier prices every unit", vol, "101", "9.08"}, // 101 x 0.08 + 1
		{"volume at a bound stays in the tier", vol, "1000", "81"},
		{"volume open tier", vol, "2000", "102"},
		{"volume zero", vol, "0", "0"},
		{"package exact", pkg, "200", "5"},
		{"package started counts", pkg, "201", "7.5"},
		{"package fraction of one", pkg, "0.5", "2.5"},
		{"package zero", pkg, "0", "0"},
		{"package fractional size", Pricing{Model: Package, PackageSize: dp("0.5"), PackagePrice: dp("1")}, "1.25", "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("pricing invalid: %v", err)
			}
			if got := tt.p.Amount(d(tt.q)); !got.Equal(d(tt.want)) {
				t.Fatalf("amount of %s = %s, want %s", tt.q, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	open := [3]string{"", "0.1", "0"}
	tests := []struct {
		name string
		p    Pricing
		code string
	}{
		{"unit", UnitPricing(d("0.5")), ""},
		{"unknown model", Pricing{Model: "tiered"}, CodeInvalidModel},
		{"no model", Pricing{}, CodeInvalidModel},
		{"unit without price", Pricing{Model: Unit}, CodeMissingField},
		{"unit negative", UnitPricing(d("-1")), CodeInvalidPrice},
		{"unit too precise", UnitPricing(d("0.0000000000001")), CodeTooPrecise},
		{"unit with 12 places", UnitPricing(d("0.000000000001")), ""},
		{"unit with trailing zeros", UnitPricing(d("0.5000000000000000")), ""},
		{"unit with tiers", Pricing{Model: Unit, UnitPrice: dp("1"), Tiers: tiers(open)}, CodeFieldNotForModel},
		{"graduated", Pricing{Model: Graduated, Tiers: tiers([3]string{"10", "0", "0"}, open)}, ""},
		{"graduated one open tier", Pricing{Model: Graduated, Tiers: tiers(open)}, ""},
		{"graduated no tiers", Pricing{Model: Graduated}, CodeMissingField},
		{"graduated with unit price", Pricing{Model: Graduated, UnitPrice: dp("1"), Tiers: tiers(open)}, CodeFieldNotForModel},
		{"last tier not open", Pricing{Model: Volume, Tiers: tiers([3]string{"10", "1", "0"})}, CodeLastTierNotOpen},
		{"open tier not last", Pricing{Model: Volume, Tiers: tiers(open, open)}, CodeLastTierNotOpen},
		{"descending", Pricing{Model: Graduated, Tiers: tiers([3]string{"10", "1", "0"}, [3]string{"5", "1", "0"}, open)}, CodeTiersNotAscending},
		{"equal bounds", Pricing{Model: Graduated, Tiers: tiers([3]string{"10", "1", "0"}, [3]string{"10", "1", "0"}, open)}, CodeTiersNotAscending},
		{"zero bound", Pricing{Model: Graduated, Tiers: tiers([3]string{"0", "1", "0"}, open)}, CodeInvalidTierBound},
		{"negative fee", Pricing{Model: Graduated, Tiers: tiers([3]string{"", "1", "-1"})}, CodeInvalidPrice},
		{"negative tier price", Pricing{Model: Volume, Tiers: tiers([3]string{"", "-0.1", "0"})}, CodeInvalidPrice},
		{"bound too precise", Pricing{Model: Volume, Tiers: tiers([3]string{"1.0000000000001", "1", "0"}, open)}, CodeTooPrecise},
		{"too many tiers", Pricing{Model: Volume, Tiers: manyTiers(MaxTiers + 1)}, CodeInvalidTiers},
		{"as many tiers as allowed", Pricing{Model: Volume, Tiers: manyTiers(MaxTiers)}, ""},
		{"package", Pricing{Model: Package, PackageSize: dp("100"), PackagePrice: dp("2")}, ""},
		{"package without size", Pricing{Model: Package, PackagePrice: dp("2")}, CodeMissingField},
		{"package zero size", Pricing{Model: Package, PackageSize: dp("0"), PackagePrice: dp("2")}, CodeInvalidPackage},
		{"package negative size", Pricing{Model: Package, PackageSize: dp("-5"), PackagePrice: dp("2")}, CodeInvalidPackage},
		{"package negative price", Pricing{Model: Package, PackageSize: dp("5"), PackagePrice: dp("-2")}, CodeInvalidPrice},
		{"package with tiers", Pricing{Model: Package, PackageSize: dp("5"), PackagePrice: dp("2"), Tiers: tiers(open)}, CodeFieldNotForModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			got := ""
			var pe *Error
			if errors.As(err, &pe) {
				got = pe.Code
			} else if err != nil {
				t.Fatalf("error %v is not a *pricing.Error", err)
			}
			if got != tt.code {
				t.Fatalf("code %q (%v), want %q", got, err, tt.code)
			}
		})
	}
}

func manyTiers(n int) []Tier {
	ts := make([]Tier, n)
	for i := range ts {
		ts[i] = Tier{UnitPrice: d("1")}
		if i < n-1 {
			ts[i].UpTo = dp(decimal.NewFromInt(int64(10 * (i + 1))).String())
		}
	}
	return ts
}

func TestJSONRoundTrip(t *testing.T) {
	p := Pricing{Model: Graduated, Tiers: tiers([3]string{"100", "0", "0"}, [3]string{"", "0.01", "5"})}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"model":"graduated","tiers":[{"upTo":"100","unitPrice":"0","flatFee":"0"},{"unitPrice":"0.01","flatFee":"5"}]}`
	if string(raw) != want {
		t.Fatalf("json %s, want %s", raw, want)
	}
	back, err := Parse(raw)
	if err != nil || !back.Amount(d("150")).Equal(p.Amount(d("150"))) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

// genDecimal draws a non-negative decimal with up to 4 places below max.
func genDecimal(t *rapid.T, label string, max int64) decimal.Decimal {
	return decimal.New(rapid.Int64Range(0, max*10000).Draw(t, label), -4)
}

func genTiers(t *rapid.T) []Tier {
	n := rapid.IntRange(1, 6).Draw(t, "tiers")
	ts := make([]Tier, n)
	bound := decimal.Zero
	for i := range ts {
		ts[i] = Tier{UnitPrice: genDecimal(t, "unitPrice", 10), FlatFee: genDecimal(t, "flatFee", 20)}
		if i < n-1 {
			bound = bound.Add(genDecimal(t, "width", 500)).Add(decimal.New(1, -4))
			b := bound
			ts[i].UpTo = &b
		}
	}
	return ts
}

// Properties of every model: the amount is exact (no more places than its
// inputs give), never negative, zero at zero, and, but under volume pricing
// (a larger quantity may reach a cheaper tier for every unit), never falls
// when the quantity rises. Graduated pricing is additive over its tiers: it is the
// sum, per tier, of that tier's units at its rate plus its fee when
// reached, and a graduated pricing with one open tier is volume pricing
// with the same tier. Package pricing is a step function of whole
// packages.
func TestAmountProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var p Pricing
		switch rapid.SampledFrom([]string{Unit, Graduated, Volume, Package}).Draw(t, "model") {
		case Unit:
			p = UnitPricing(genDecimal(t, "unitPrice", 10))
		case Graduated:
			p = Pricing{Model: Graduated, Tiers: genTiers(t)}
		case Volume:
			p = Pricing{Model: Volume, Tiers: genTiers(t)}
		case Package:
			size := genDecimal(t, "size", 100).Add(decimal.New(1, -4))
			price := genDecimal(t, "packagePrice", 50)
			p = Pricing{Model: Package, PackageSize: &size, PackagePrice: &price}
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("generated pricing invalid: %v", err)
		}
		q1 := genDecimal(t, "q1", 5000)
		q2 := q1.Add(genDecimal(t, "more", 5000))
		a1, a2 := p.Amount(q1), p.Amount(q2)
		if a1.IsNegative() || (p.Model != Volume && a2.LessThan(a1)) {
			t.Fatalf("amount(%s) = %s, amount(%s) = %s: negative or falling", q1, a1, q2, a2)
		}
		if !p.Amount(decimal.Zero).IsZero() {
			t.Fatalf("amount at zero is %s", p.Amount(decimal.Zero))
		}
		if -a2.Exponent() > 8 && !a2.Equal(a2.Truncate(8)) { // 4 places of quantity x 4 of price
			t.Fatalf("amount %s has more places than its inputs give", a2)
		}
		switch p.Model {
		case Graduated:
			if want := gradBySum(p.Tiers, q2); !a2.Equal(want) {
				t.Fatalf("graduated amount(%s) = %s, tier by tier %s", q2, a2, want)
			}
			if len(p.Tiers) == 1 {
				v := Pricing{Model: Volume, Tiers: p.Tiers}
				if q2.IsPositive() && !v.Amount(q2).Equal(a2) {
					t.Fatalf("one open tier: graduated %s, volume %s", a2, v.Amount(q2))
				}
			}
		case Package:
			n := a2
			if p.PackagePrice.IsPositive() {
				n = a2.Div(*p.PackagePrice)
			}
			if p.PackagePrice.IsPositive() && (!n.Equal(n.Truncate(0)) || n.Mul(*p.PackageSize).LessThan(q2) ||
				(n.IsPositive() && n.Sub(decimal.NewFromInt(1)).Mul(*p.PackageSize).GreaterThanOrEqual(q2))) {
				t.Fatalf("package: %s packages of %s for %s units", n, p.PackageSize, q2)
			}
		case Volume:
			// Some tier prices every unit: amount = q x rate + fee of one tier.
			ok := false
			for _, tr := range p.Tiers {
				if q2.IsPositive() && q2.Mul(tr.UnitPrice).Add(tr.FlatFee).Equal(a2) {
					ok = true
				}
			}
			if q2.IsPositive() && !ok {
				t.Fatalf("volume amount %s is no tier's price of %s", a2, q2)
			}
		}
	})
}

// gradBySum is graduated pricing written another way: for each tier, the
// units between its bounds the quantity covers.
func gradBySum(ts []Tier, q decimal.Decimal) decimal.Decimal {
	sum := decimal.Zero
	for i, tr := range ts {
		lo := decimal.Zero
		if i > 0 {
			lo = *ts[i-1].UpTo
		}
		hi := q
		if tr.UpTo != nil && tr.UpTo.LessThan(q) {
			hi = *tr.UpTo
		}
		if units := hi.Sub(lo); units.IsPositive() {
			sum = sum.Add(units.Mul(tr.UnitPrice)).Add(tr.FlatFee)
		}
	}
	return sum
}
