package domain

import (
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/money"
)

// CreditExceedsInvoiceError: a correction note would take its invoice below
// zero (the invoice's total plus its correction notes). Billing refuses
// such a credit at its API; invoice never issues one it receives anyway.
type CreditExceedsInvoiceError struct {
	Amount, Total, Corrected decimal.Decimal
}

func (e *CreditExceedsInvoiceError) Error() string {
	return fmt.Sprintf("a correction of %s would take the invoice below zero: its total is %s and its correction notes %s",
		e.Amount, e.Total, e.Corrected)
}

// CheckCorrection decides whether a correction note of amount may be
// issued for an issued invoice of currency whose total is total and whose
// other correction notes sum to corrected. Everything issued after the
// invoice is in whole minor units (an error wrapping
// money.ErrAmountPrecision, decision 0008), and a credit may not take the
// invoice below zero (*CreditExceedsInvoiceError); taking it to exactly
// zero is allowed. An unknown currency is money.Currency's error.
func CheckCorrection(amount decimal.Decimal, currency string, total, corrected decimal.Decimal) error {
	if err := money.CheckMinorUnits(amount, currency); err != nil {
		return err
	}
	if amount.IsNegative() && total.Add(corrected).Add(amount).IsNegative() {
		return &CreditExceedsInvoiceError{Amount: amount, Total: total, Corrected: corrected}
	}
	return nil
}
