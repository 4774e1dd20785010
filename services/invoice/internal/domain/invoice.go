// Package domain holds the invoice rules: what a close must find before it
// issues a period's invoices, how a charge line's amount follows from its
// price version, the stable ids of the lines, and the one rounding an
// invoice gets, at issue. It knows nothing of HTTP, Kafka or SQL.
package domain

import (
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/pricing"
)

// Line kinds.
const (
	KindCharge     = "charge"
	KindAdjustment = "adjustment"
	KindRounding   = "rounding"
	KindTax        = "tax"
)

// Invoice statuses.
const (
	StatusOpen   = "open"
	StatusIssued = "issued"
	// StatusDraft is how an open invoice reads once its period ended and
	// is in grace (billing's BillingPeriodEnded), until the close issues
	// it; it is never stored (decision 0014).
	StatusDraft = "draft"
)

// ChargeLineID is the id of the charge line of a meter and price version:
// "charge/<meterCode>/<priceVersion>".
func ChargeLineID(meterCode string, priceVersion int64) string {
	return KindCharge + "/" + meterCode + "/" + strconv.FormatInt(priceVersion, 10)
}

// AdjustmentLineID is the id of the line of an AdjustmentPosted:
// "adjustment/<originEventId>".
func AdjustmentLineID(originEventID uuid.UUID) string {
	return KindAdjustment + "/" + originEventID.String()
}

// RoundingLineID is the id of an invoice's rounding line (at most one).
const RoundingLineID = KindRounding

// TaxLineID is the id of a tax line, "tax/<code>".
func TaxLineID(code string) string { return KindTax + "/" + code }

// FeeLineID is the id of a fixed-fee line, "fixed_fee/<planCode>/<planVersion>/<feeCode>",
// or of a true-up line, "minimum_true_up/<planCode>/<planVersion>" (feeCode "").
func FeeLineID(kind, planCode string, planVersion int64, feeCode string) string {
	id := kind + "/" + planCode + "/" + strconv.FormatInt(planVersion, 10)
	if feeCode != "" {
		id += "/" + feeCode
	}
	return id
}

// Pricing models of a price version (docs/money.md; package pricing).
// Charges carry an amount under unit pricing only; under the others a
// line's amount is the version's pricing function over the line's quantity.
const (
	ModelUnit      = pricing.Unit
	ModelGraduated = pricing.Graduated
	ModelVolume    = pricing.Volume
	ModelPackage   = pricing.Package
)

// Pricing is the pricing function of a price version: Model, and the
// fields of that model (UnitPrice for unit; Tiers for graduated and
// volume; PackageSize and PackagePrice for package).
type Pricing struct {
	Model        string
	UnitPrice    decimal.Decimal // ModelUnit
	Tiers        []pricing.Tier  // ModelGraduated, ModelVolume
	PackageSize  decimal.Decimal // ModelPackage
	PackagePrice decimal.Decimal // ModelPackage
}

// PricingOf is package pricing's function as a Pricing.
func PricingOf(f pricing.Pricing) Pricing {
	p := Pricing{Model: f.Model, Tiers: f.Tiers}
	if f.UnitPrice != nil {
		p.UnitPrice = *f.UnitPrice
	}
	if f.PackageSize != nil && f.PackagePrice != nil {
		p.PackageSize, p.PackagePrice = *f.PackageSize, *f.PackagePrice
	}
	return p
}

// Function is p as package pricing's function.
func (p Pricing) Function() pricing.Pricing {
	switch p.Model {
	case ModelUnit:
		return pricing.UnitPricing(p.UnitPrice)
	case ModelPackage:
		size, price := p.PackageSize, p.PackagePrice
		return pricing.Pricing{Model: p.Model, PackageSize: &size, PackagePrice: &price}
	default:
		return pricing.Pricing{Model: p.Model, Tiers: p.Tiers}
	}
}

// LineAmount is the amount of a charge line: the pricing function of its
// price version over the line's quantity (the quantity that version rated in
// the invoice's period: a version's tiers count from zero in each period).
// Under unit pricing, quantity x unit price, exact; under the others what
// package pricing gives, exact too (rounded only at issue, with the
// invoice's total).
func LineAmount(p Pricing, quantity decimal.Decimal) (decimal.Decimal, error) {
	f := p.Function()
	if err := f.Validate(); err != nil {
		return decimal.Decimal{}, fmt.Errorf("pricing of the line: %w", err)
	}
	if quantity.IsNegative() {
		return decimal.Decimal{}, fmt.Errorf("quantity %s is negative", quantity)
	}
	return f.Amount(quantity), nil
}

// LineAmountMismatchError: a charge line's charges do not sum to the
// line's amount under its pricing (a charge was rated at another price).
type LineAmountMismatchError struct {
	LineID        string
	Line, Charges decimal.Decimal
}

func (e *LineAmountMismatchError) Error() string {
	return fmt.Sprintf("line %s: the pricing gives %s, its charges sum to %s", e.LineID, e.Line, e.Charges)
}

// CheckLine checks that a charge line's charges, summed, are the line's
// amount under its pricing. It holds for unit pricing only, where each
// charge carries its amount; under the other models charges carry none and
// the line's amount is LineAmount itself.
func CheckLine(lineID string, p Pricing, quantity, chargesAmount decimal.Decimal) error {
	amount, err := LineAmount(p, quantity)
	if err != nil {
		return fmt.Errorf("line %s: %w", lineID, err)
	}
	if !amount.Equal(chargesAmount) {
		return &LineAmountMismatchError{LineID: lineID, Line: amount, Charges: chargesAmount}
	}
	return nil
}

// Tally is what a close counted in one currency, or what invoice holds of
// it: charges and adjustment lines, each counted, summed exactly and
// digested (pkg/digest: the decimal sum of their event ids' terms). Its
// fields are those of events.CloseTally, so one converts to the other.
type Tally struct {
	Charges          int64
	ChargeAmount     decimal.Decimal
	ChargeDigest     string
	Adjustments      int64
	AdjustmentAmount decimal.Decimal
	AdjustmentDigest string
}

// IncompleteError: invoice holds fewer charges or adjustments of a currency
// than the close counted; the missing events may still arrive, so the close
// waits.
type IncompleteError struct {
	Currency   string
	Have, Want Tally
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("%s: close counted %d charges and %d adjustments, invoice holds %d and %d",
		e.Currency, e.Want.Charges, e.Want.Adjustments, e.Have.Charges, e.Have.Adjustments)
}

// CountsMismatchError: invoice holds more charges or adjustments of a
// currency than the close counted; waiting cannot fix that.
type CountsMismatchError struct {
	Currency   string
	Have, Want Tally
}

func (e *CountsMismatchError) Error() string {
	return fmt.Sprintf("%s: close counted %d charges and %d adjustments, invoice holds more: %d and %d",
		e.Currency, e.Want.Charges, e.Want.Adjustments, e.Have.Charges, e.Have.Adjustments)
}

// DigestMismatchError: invoice holds as many charges (or adjustments) of a
// currency as the close counted, but not the same ones.
type DigestMismatchError struct {
	Currency, Kind string
	Have, Want     string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("%s %s: as many as the close counted but not the same events: digest %s, close %s",
		e.Currency, e.Kind, e.Have, e.Want)
}

// TotalsMismatchError: invoice holds the same charges (or adjustments) of a
// currency as the close counted, but they do not sum to the close's amount.
type TotalsMismatchError struct {
	Currency, Kind string
	Have, Want     decimal.Decimal
}

func (e *TotalsMismatchError) Error() string {
	return fmt.Sprintf("%s %s: close amount is %s, invoice's sum to %s", e.Currency, e.Kind, e.Want, e.Have)
}

// CheckClose decides whether a period's invoices may be issued by a close
// that counted want (by currency), invoice holding have; a currency absent
// on one side counts as nothing. The sets are compared by count, then by
// digest (same members), then by amount. It returns, the first that holds:
// *CountsMismatchError when a currency has more charges or adjustments than
// counted; *DigestMismatchError or *TotalsMismatchError when a set has the
// count but not the members or not the amount (no arrival can fix either);
// *IncompleteError when a set has fewer members (the close waits); nil when
// every set matches.
func CheckClose(want, have map[string]Tally) error {
	currencies := slices.Sorted(maps.Keys(want))
	for cur := range have {
		if _, ok := want[cur]; !ok {
			currencies = append(currencies, cur)
		}
	}
	slices.Sort(currencies)
	for _, cur := range currencies {
		if h, w := have[cur], want[cur]; h.Charges > w.Charges || h.Adjustments > w.Adjustments {
			return &CountsMismatchError{Currency: cur, Have: h, Want: w}
		}
	}
	for _, cur := range currencies {
		h, w := have[cur], want[cur]
		if h.Charges == w.Charges {
			if err := compareSet(cur, KindCharge, h.ChargeDigest, w.ChargeDigest, h.ChargeAmount, w.ChargeAmount); err != nil {
				return err
			}
		}
		if h.Adjustments == w.Adjustments {
			if err := compareSet(cur, KindAdjustment, h.AdjustmentDigest, w.AdjustmentDigest, h.AdjustmentAmount, w.AdjustmentAmount); err != nil {
				return err
			}
		}
	}
	for _, cur := range currencies {
		if h, w := have[cur], want[cur]; h.Charges < w.Charges || h.Adjustments < w.Adjustments {
			return &IncompleteError{Currency: cur, Have: h, Want: w}
		}
	}
	return nil
}

// compareSet compares two sets of the same size: digest, then amount.
func compareSet(currency, kind, haveDigest, wantDigest string, haveAmount, wantAmount decimal.Decimal) error {
	if !sameDigest(haveDigest, wantDigest) {
		return &DigestMismatchError{Currency: currency, Kind: kind, Have: haveDigest, Want: wantDigest}
	}
	if !haveAmount.Equal(wantAmount) {
		return &TotalsMismatchError{Currency: currency, Kind: kind, Have: haveAmount, Want: wantAmount}
	}
	return nil
}

// sameDigest compares two digests as the integers they write ("" is the
// empty set's 0); one that is not an integer matches nothing.
func sameDigest(a, b string) bool {
	parse := func(s string) (*big.Int, bool) {
		if s == "" {
			return new(big.Int), true
		}
		return new(big.Int).SetString(s, 10)
	}
	x, okX := parse(a)
	y, okY := parse(b)
	return okX && okY && x.Cmp(y) == 0
}

// Amounts are an invoice's figures at issue (DESIGN.md section 3a).
type Amounts struct {
	Subtotal decimal.Decimal // exact sum of the charge, fee and adjustment lines
	Rounding decimal.Decimal // Subtotal rounded half-even to the minor unit, less Subtotal; a rounding line when not zero
	Taxes    []TaxLine       // one per tax rate, in the rates' order
	TaxTotal decimal.Decimal // the sum of Taxes
	Total    decimal.Decimal // Subtotal + Rounding + TaxTotal
}

// TaxLine is a tax line: its rate times the rounded subtotal, rounded
// half-even to the minor unit.
type TaxLine struct {
	Code, Name   string
	Rate, Amount decimal.Decimal
}

// Issue rounds an invoice's subtotal once, half to even, to the minor unit of
// its currency (0 decimals for KRW, 2 for USD), then adds one tax per rate,
// rate x the rounded subtotal, itself rounded half-even.
func Issue(subtotal decimal.Decimal, currency string, rates []events.TaxRate) (Amounts, error) {
	rounded, err := money.Round(subtotal, currency)
	if err != nil {
		return Amounts{}, err
	}
	a := Amounts{Subtotal: subtotal, Rounding: rounded.Sub(subtotal), TaxTotal: decimal.Zero}
	for _, r := range rates {
		tax, err := money.Round(r.Rate.Mul(rounded), currency)
		if err != nil {
			return Amounts{}, err
		}
		a.Taxes = append(a.Taxes, TaxLine{Code: r.Code, Name: r.Name, Rate: r.Rate, Amount: tax})
		a.TaxTotal = a.TaxTotal.Add(tax)
	}
	a.Total = rounded.Add(a.TaxTotal)
	return a, nil
}
