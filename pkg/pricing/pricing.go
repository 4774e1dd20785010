// Package pricing is the pricing function of a price version
// (docs/money.md, decision 0012): its model, what a valid one is, and the
// exact amount it gives a quantity. Meter validates prices with it, billing estimates with it and
// invoice prices its lines with it, so the three read one definition. It
// knows nothing of HTTP, Kafka or SQL.
//
// Models:
//
//   - unit: quantity x unitPrice.
//   - graduated: tiers in ascending upTo, the last open (no upTo); each unit
//     is priced at the rate of the tier it falls in, and each tier reached
//     (the quantity is above its lower bound) adds its flatFee. A free
//     allowance is a first tier at 0.
//   - volume: the tier the whole quantity falls in (the first whose upTo is
//     at least the quantity, else the open one) prices every unit at its
//     rate, plus its flatFee.
//   - package: whole packages of packageSize units at packagePrice each; a
//     started package counts.
//
// A quantity of zero costs nothing under every model: no tier is reached
// and no package started.
package pricing

import (
	"encoding/json"
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/money"
)

// Models.
const (
	Unit      = "unit"
	Graduated = "graduated"
	Volume    = "volume"
	Package   = "package"
)

// Limits.
const (
	// MaxTiers bounds a version's tiers (and so the size of the events
	// that carry them).
	MaxTiers = 20
	// MaxScale is the most decimal places of a price, fee, bound or size
	// (money.MaxScale); each also has at most money.MaxIntegerDigits
	// digits before the point (decimal_out_of_range).
	MaxScale = money.MaxScale
)

// Problem codes of Validate's errors. They are part of meter's HTTP
// contract.
const (
	CodeInvalidModel      = "invalid_model"
	CodeMissingField      = "missing_field"
	CodeFieldNotForModel  = "field_not_for_model"
	CodeInvalidTiers      = "invalid_tiers"
	CodeTiersNotAscending = "tiers_not_ascending"
	CodeLastTierNotOpen   = "last_tier_not_open"
	CodeInvalidTierBound  = "invalid_tier_bound"
	CodeInvalidPrice      = "invalid_price"
	CodeInvalidPackage    = "invalid_package_size"
	CodeTooPrecise        = money.CodeTooPrecise
	CodeOutOfRange        = money.CodeOutOfRange
)

// Error is an invalid pricing, with a stable code.
type Error struct {
	Code   string
	Detail string
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

func invalid(code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Tier is one tier of a graduated or volume pricing. UpTo is the tier's
// upper bound, inclusive; nil for the last, open tier.
type Tier struct {
	UpTo      *decimal.Decimal `json:"upTo,omitempty"`
	UnitPrice decimal.Decimal  `json:"unitPrice"`
	FlatFee   decimal.Decimal  `json:"flatFee"`
}

// Pricing is the pricing function of a price version. Only the fields of
// its model are set.
type Pricing struct {
	Model        string           `json:"model"`
	UnitPrice    *decimal.Decimal `json:"unitPrice,omitempty"`    // unit
	Tiers        []Tier           `json:"tiers,omitempty"`        // graduated, volume
	PackageSize  *decimal.Decimal `json:"packageSize,omitempty"`  // package
	PackagePrice *decimal.Decimal `json:"packagePrice,omitempty"` // package
}

// UnitPricing is the unit pricing at unitPrice.
func UnitPricing(unitPrice decimal.Decimal) Pricing {
	return Pricing{Model: Unit, UnitPrice: &unitPrice}
}

// Validate checks p: a known model with its fields and no other, tiers
// ascending with the last open, prices and fees not negative, a positive
// package size, at most MaxScale decimal places anywhere.
func (p Pricing) Validate() error {
	switch p.Model {
	case Unit:
		return p.validateUnit()
	case Graduated, Volume:
		return p.validateTiers()
	case Package:
		return p.validatePackage()
	default:
		return invalid(CodeInvalidModel, "model must be one of unit, graduated, volume, package, got %q", clip(p.Model))
	}
}

func (p Pricing) validateUnit() error {
	if p.UnitPrice == nil {
		return invalid(CodeMissingField, `model unit needs "unitPrice"`)
	}
	if len(p.Tiers) > 0 || p.PackageSize != nil || p.PackagePrice != nil {
		return invalid(CodeFieldNotForModel, `model unit takes "unitPrice" only (no tiers, packageSize or packagePrice)`)
	}
	return price("unitPrice", *p.UnitPrice)
}

func (p Pricing) validatePackage() error {
	if p.PackageSize == nil || p.PackagePrice == nil {
		return invalid(CodeMissingField, `model package needs "packageSize" and "packagePrice"`)
	}
	if p.UnitPrice != nil || len(p.Tiers) > 0 {
		return invalid(CodeFieldNotForModel, `model package takes "packageSize" and "packagePrice" only`)
	}
	if !p.PackageSize.IsPositive() {
		return invalid(CodeInvalidPackage, "packageSize must be positive, got %s", p.PackageSize)
	}
	if err := scale("packageSize", *p.PackageSize); err != nil {
		return err
	}
	return price("packagePrice", *p.PackagePrice)
}

func (p Pricing) validateTiers() error {
	if p.UnitPrice != nil || p.PackageSize != nil || p.PackagePrice != nil {
		return invalid(CodeFieldNotForModel, `model %s takes "tiers" only`, p.Model)
	}
	switch n := len(p.Tiers); {
	case n == 0:
		return invalid(CodeMissingField, `model %s needs "tiers": at least one, the last without upTo`, p.Model)
	case n > MaxTiers:
		return invalid(CodeInvalidTiers, "%d tiers: at most %d", n, MaxTiers)
	}
	var prev *decimal.Decimal
	for i, t := range p.Tiers {
		last := i == len(p.Tiers)-1
		switch {
		case t.UpTo == nil && !last:
			return invalid(CodeLastTierNotOpen, "tier %d has no upTo: only the last tier is open", i+1)
		case t.UpTo != nil && last:
			return invalid(CodeLastTierNotOpen, "the last tier (%d) must be open: no upTo", i+1)
		case t.UpTo != nil && !t.UpTo.IsPositive():
			return invalid(CodeInvalidTierBound, "tier %d: upTo must be positive, got %s", i+1, t.UpTo)
		case t.UpTo != nil && prev != nil && !t.UpTo.GreaterThan(*prev):
			return invalid(CodeTiersNotAscending, "tier %d: upTo %s is not above the previous tier's %s", i+1, t.UpTo, prev)
		}
		if t.UpTo != nil {
			if err := scale(fmt.Sprintf("tiers[%d].upTo", i), *t.UpTo); err != nil {
				return err
			}
		}
		if err := price(fmt.Sprintf("tiers[%d].unitPrice", i), t.UnitPrice); err != nil {
			return err
		}
		if err := price(fmt.Sprintf("tiers[%d].flatFee", i), t.FlatFee); err != nil {
			return err
		}
		prev = t.UpTo
	}
	return nil
}

func price(field string, d decimal.Decimal) error {
	if d.IsNegative() {
		return invalid(CodeInvalidPrice, "%s must not be negative, got %s", field, d)
	}
	return scale(field, d)
}

func scale(field string, d decimal.Decimal) error {
	if -d.Exponent() > MaxScale && !d.Equal(d.Truncate(MaxScale)) {
		return invalid(CodeTooPrecise, "%s has more than %d decimal places: %s", field, MaxScale, d)
	}
	if err := money.CheckRange(d); err != nil {
		return invalid(CodeOutOfRange, "%s: %v", field, err)
	}
	return nil
}

// Amount is the exact amount p gives quantity (not negative): no rounding,
// the scale is what the inputs produce. p must be valid.
func (p Pricing) Amount(quantity decimal.Decimal) decimal.Decimal {
	if !quantity.IsPositive() {
		return decimal.Zero
	}
	switch p.Model {
	case Unit:
		return quantity.Mul(*p.UnitPrice)
	case Graduated:
		return graduated(p.Tiers, quantity)
	case Volume:
		return volume(p.Tiers, quantity)
	case Package:
		return packages(quantity, *p.PackageSize).Mul(*p.PackagePrice)
	}
	panic(fmt.Sprintf("pricing: amount under unknown model %q", p.Model))
}

// graduated prices each unit at its tier's rate and adds the flat fee of
// every tier reached.
func graduated(tiers []Tier, q decimal.Decimal) decimal.Decimal {
	amount := decimal.Zero
	lower := decimal.Zero
	for _, t := range tiers {
		if !q.GreaterThan(lower) {
			break
		}
		in := q.Sub(lower)
		if t.UpTo != nil && q.GreaterThan(*t.UpTo) {
			in = t.UpTo.Sub(lower)
		}
		amount = amount.Add(in.Mul(t.UnitPrice)).Add(t.FlatFee)
		if t.UpTo == nil {
			break
		}
		lower = *t.UpTo
	}
	return amount
}

// volume prices every unit at the rate of the tier the quantity falls in.
func volume(tiers []Tier, q decimal.Decimal) decimal.Decimal {
	for _, t := range tiers {
		if t.UpTo == nil || !q.GreaterThan(*t.UpTo) {
			return q.Mul(t.UnitPrice).Add(t.FlatFee)
		}
	}
	panic("pricing: volume tiers without an open last tier")
}

// packages is the number of packages of size q units start: ceil(q / size),
// exactly.
func packages(q, size decimal.Decimal) decimal.Decimal {
	whole, rest := q.QuoRem(size, 0)
	if rest.IsPositive() {
		whole = whole.Add(decimal.NewFromInt(1))
	}
	return whole
}

// Parse reads a pricing from JSON and validates it.
func Parse(raw []byte) (Pricing, error) {
	var p Pricing
	if err := json.Unmarshal(raw, &p); err != nil {
		return Pricing{}, fmt.Errorf("decode pricing: %w", err)
	}
	return p, p.Validate()
}

func clip(s string) string {
	if r := []rune(s); len(r) > 32 {
		return string(r[:32]) + "..."
	}
	return s
}
