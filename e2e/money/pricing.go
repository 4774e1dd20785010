package money

import (
	"fmt"
	"strings"

	"github.com/shopspring/decimal"
)

// The pricing models of a price version (docs/money.md, decision 0012).
const (
	Unit      = "unit"
	Graduated = "graduated"
	Volume    = "volume"
	Package   = "package"
)

// mutation is a deliberate error in the model (MONEY_MUTATE), to see the
// test fail: "graduated-boundary" counts a graduated tier as reached (its
// flat fee charged) when the quantity is exactly the previous tier's upTo;
// "volume-floor" bounds credits by a volume line's amount, not its floor;
// the others are listed in docs/money.md.
var mutation string

// quantum is the smallest quantity step: at most 12 decimal places.
var quantum = decimal.New(1, -12)

// Tier is one tier of a graduated or volume price; UpTo is inclusive, nil
// for the last (open) tier.
type Tier struct {
	UpTo      *decimal.Decimal
	UnitPrice decimal.Decimal
	FlatFee   decimal.Decimal
}

// Pricing is the pricing function of one price version.
type Pricing struct {
	Model        string
	UnitPrice    decimal.Decimal
	Tiers        []Tier
	PackageSize  decimal.Decimal
	PackagePrice decimal.Decimal
}

// Amount is the exact price of quantity q under p; zero costs nothing.
func (p Pricing) Amount(q decimal.Decimal) decimal.Decimal {
	if q.Sign() <= 0 {
		return decimal.Zero
	}
	switch p.Model {
	case Unit:
		return q.Mul(p.UnitPrice)
	case Graduated:
		total := decimal.Zero
		lower := decimal.Zero
		for _, t := range p.Tiers {
			if q.LessThanOrEqual(lower) && !(mutation == "graduated-boundary" && q.Equal(lower) && !lower.IsZero()) {
				break // the tier is not reached: q must be above its lower bound
			}
			top := q
			if t.UpTo != nil && t.UpTo.LessThan(q) {
				top = *t.UpTo
			}
			total = total.Add(top.Sub(lower).Mul(t.UnitPrice)).Add(t.FlatFee)
			if t.UpTo == nil {
				break
			}
			lower = *t.UpTo
		}
		return total
	case Volume:
		for _, t := range p.Tiers {
			if t.UpTo == nil || q.LessThanOrEqual(*t.UpTo) {
				return q.Mul(t.UnitPrice).Add(t.FlatFee)
			}
		}
		panic("volume pricing without an open tier")
	case Package:
		packages := q.Div(p.PackageSize).Ceil()
		if packages.Mul(p.PackageSize).LessThan(q) { // Div rounds at 16 places: make sure
			packages = packages.Add(decimal.NewFromInt(1))
		}
		return packages.Mul(p.PackagePrice)
	}
	panic("unknown model " + p.Model)
}

// Floor is the least the line can ever come to as its quantity grows from q
// (decision 0010): the amount itself, but for a volume line the least of the
// amount and the amount just past each tier bound at or above q (the bound
// plus one quantum, the first quantity of the next tier).
func (p Pricing) Floor(q decimal.Decimal) decimal.Decimal {
	a := p.Amount(q)
	if p.Model != Volume || mutation == "volume-floor" {
		return a
	}
	for _, t := range p.Tiers {
		if t.UpTo != nil && t.UpTo.GreaterThanOrEqual(q) {
			a = decimal.Min(a, p.Amount(t.UpTo.Add(quantum)))
		}
	}
	return a
}

// Bounds are the quantities where the price changes its step: tier bounds,
// package multiples (the first few).
func (p Pricing) Bounds() []decimal.Decimal {
	var out []decimal.Decimal
	switch p.Model {
	case Graduated, Volume:
		for _, t := range p.Tiers {
			if t.UpTo != nil {
				out = append(out, *t.UpTo)
			}
		}
	case Package:
		for i := int64(1); i <= 5; i++ {
			out = append(out, p.PackageSize.Mul(decimal.NewFromInt(i)))
		}
	}
	return out
}

// request is the meter API's body for p (pkg/api/meterapi/openapi.yaml).
func (p Pricing) request() map[string]any {
	b := map[string]any{"model": p.Model}
	switch p.Model {
	case Unit:
		b["unitPrice"] = p.UnitPrice.String()
	case Graduated, Volume:
		tiers := make([]map[string]any, 0, len(p.Tiers))
		for _, t := range p.Tiers {
			m := map[string]any{"unitPrice": t.UnitPrice.String()}
			if t.UpTo != nil {
				m["upTo"] = t.UpTo.String()
			}
			if !t.FlatFee.IsZero() {
				m["flatFee"] = t.FlatFee.String()
			}
			tiers = append(tiers, m)
		}
		b["tiers"] = tiers
	case Package:
		b["packageSize"] = p.PackageSize.String()
		b["packagePrice"] = p.PackagePrice.String()
	}
	return b
}

func (p Pricing) String() string {
	switch p.Model {
	case Unit:
		return "unit " + p.UnitPrice.String()
	case Package:
		return fmt.Sprintf("package %s per %s", p.PackagePrice, p.PackageSize)
	}
	parts := make([]string, 0, len(p.Tiers))
	for _, t := range p.Tiers {
		up := "inf"
		if t.UpTo != nil {
			up = t.UpTo.String()
		}
		s := "<=" + up + "@" + t.UnitPrice.String()
		if !t.FlatFee.IsZero() {
			s += "+" + t.FlatFee.String()
		}
		parts = append(parts, s)
	}
	return p.Model + " [" + strings.Join(parts, " ") + "]"
}

// minorUnits are the ISO 4217 exponents of the currencies the test bills in
// (List One): written here, not read from pkg/money.
var minorUnits = map[string]int32{"USD": 2, "EUR": 2, "JPY": 0, "KRW": 0, "BHD": 3, "KWD": 3}

func minor(currency string) int32 {
	e, ok := minorUnits[currency]
	if !ok {
		panic("no minor unit for " + currency)
	}
	return e
}

// roundTotal rounds d half-even to the minor unit: an invoice's subtotal,
// once, and each of its taxes.
func roundTotal(d decimal.Decimal, currency string) decimal.Decimal {
	e := minor(currency)
	// half-even by hand: compare the remainder with half a minor unit
	unit := decimal.New(1, -e)
	units := d.Shift(e).Floor() // whole minor units <= d (Shift is exact)
	down := units.Shift(-e)
	rest := d.Sub(down)
	half := decimal.New(5, -e-1)
	switch rest.Cmp(half) {
	case -1:
		return down
	case 1:
		return down.Add(unit)
	}
	if units.Mod(decimal.NewFromInt(2)).IsZero() {
		return down
	}
	return down.Add(unit)
}

// wholeMinor reports whether d is a whole number of currency's minor units.
func wholeMinor(d decimal.Decimal, currency string) bool {
	return d.Equal(d.Truncate(minor(currency)))
}

// floorMinor is the largest whole number of minor units <= d.
func floorMinor(d decimal.Decimal, currency string) decimal.Decimal {
	e := minor(currency)
	return d.Shift(e).Floor().Shift(-e)
}
