// Package domain holds the invoice rules: what a close must find before it
// issues a period's invoices, and the one rounding an invoice gets, at issue.
// It knows nothing of HTTP, Kafka or SQL.
package domain

import (
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/money"
)

// Line kinds.
const (
	KindCharge     = "charge"
	KindAdjustment = "adjustment"
	KindRounding   = "rounding"
)

// Invoice statuses.
const (
	StatusOpen   = "open"
	StatusIssued = "issued"
)

// Tally is what a close needs to know of one invoice of its period: its
// charge and adjustment lines, counted and summed.
type Tally struct {
	InvoiceID   uuid.UUID
	Currency    string
	Issued      bool
	Charges     int64
	Adjustments int64
	Subtotal    decimal.Decimal // exact sum of the charge and adjustment lines
}

// Close is what billing counted when it closed a tenant's period.
type Close struct {
	Charges     int64
	Adjustments int64
	Totals      map[string]decimal.Decimal // by currency: charges + adjustments, exact
}

// IncompleteError: the invoices hold fewer lines than the close counted; the
// missing events may still arrive, so the close waits.
type IncompleteError struct {
	HaveCharges, WantCharges         int64
	HaveAdjustments, WantAdjustments int64
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("close counted %d charges and %d adjustments, invoices hold %d and %d",
		e.WantCharges, e.WantAdjustments, e.HaveCharges, e.HaveAdjustments)
}

// CountsMismatchError: the invoices hold more lines of a kind than the close
// counted; waiting cannot fix that.
type CountsMismatchError struct {
	HaveCharges, WantCharges         int64
	HaveAdjustments, WantAdjustments int64
}

func (e *CountsMismatchError) Error() string {
	return fmt.Sprintf("close counted %d charges and %d adjustments, invoices hold more: %d and %d",
		e.WantCharges, e.WantAdjustments, e.HaveCharges, e.HaveAdjustments)
}

// TotalsMismatchError: with every counted line present, a currency's lines do
// not sum to the close's total for it.
type TotalsMismatchError struct {
	Currency   string
	Have, Want decimal.Decimal
}

func (e *TotalsMismatchError) Error() string {
	return fmt.Sprintf("close total for %s is %s, invoice lines sum to %s", e.Currency, e.Want, e.Have)
}

// CheckClose decides whether a period's invoices may be issued by close c:
// the charge and adjustment lines present must be exactly the ones the close
// counted (fewer: *IncompleteError, wait; more: *CountsMismatchError), and
// each currency's lines must sum to the close's total for it, a currency
// absent on either side counting as zero (*TotalsMismatchError). So a
// currency the close lists with a zero total and no invoice gets none: an
// invoice exists only once it has a line.
func CheckClose(c Close, tallies []Tally) error {
	var charges, adjustments int64
	sums := make(map[string]decimal.Decimal, len(tallies))
	for _, t := range tallies {
		charges += t.Charges
		adjustments += t.Adjustments
		sums[t.Currency] = sums[t.Currency].Add(t.Subtotal)
	}
	switch {
	case charges > c.Charges || adjustments > c.Adjustments:
		return &CountsMismatchError{HaveCharges: charges, WantCharges: c.Charges,
			HaveAdjustments: adjustments, WantAdjustments: c.Adjustments}
	case charges < c.Charges || adjustments < c.Adjustments:
		return &IncompleteError{HaveCharges: charges, WantCharges: c.Charges,
			HaveAdjustments: adjustments, WantAdjustments: c.Adjustments}
	}
	currencies := slices.Sorted(maps.Keys(sums))
	for cur := range c.Totals {
		if _, ok := sums[cur]; !ok {
			currencies = append(currencies, cur)
		}
	}
	slices.Sort(currencies)
	for _, cur := range currencies {
		if have, want := sums[cur], c.Totals[cur]; !have.Equal(want) {
			return &TotalsMismatchError{Currency: cur, Have: have, Want: want}
		}
	}
	return nil
}

// Amounts are an invoice's figures at issue.
type Amounts struct {
	Subtotal decimal.Decimal // exact sum of the charge and adjustment lines
	Total    decimal.Decimal // Subtotal rounded half-even to the currency's minor unit
	Rounding decimal.Decimal // Total - Subtotal; a rounding line when not zero
}

// Issue rounds an invoice's subtotal once, half to even, to the minor unit of
// its currency (0 decimals for KRW, 2 for USD).
func Issue(subtotal decimal.Decimal, currency string) (Amounts, error) {
	total, err := money.Round(subtotal, currency)
	if err != nil {
		return Amounts{}, err
	}
	return Amounts{Subtotal: subtotal, Total: total, Rounding: total.Sub(subtotal)}, nil
}
