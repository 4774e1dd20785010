package domain

import (
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/rule"
)

// Balance is what a tenant's period holds in one currency: the exact sums
// of its charges and of its adjustments (credits negative).
type Balance struct {
	Charged  decimal.Decimal
	Adjusted decimal.Decimal
}

// Total is charges plus adjustments.
func (b Balance) Total() decimal.Decimal { return b.Charged.Add(b.Adjusted) }

// CreditNeedsCheck says whether an adjustment of amount must be checked
// against its period's balance: credits (negative amounts) only; a debit
// never takes a period below zero.
func CreditNeedsCheck(amount decimal.Decimal) bool { return amount.IsNegative() }

// CheckCredit checks that a credit does not take its period's charges
// below zero in its currency: credits never exceed what they credit
// (docs/money.md, decision 0010). A credit equal to what is left is allowed.
func CheckCredit(amount decimal.Decimal, currency string, b Balance) error {
	if !CreditNeedsCheck(amount) {
		return nil
	}
	if after := b.Total().Add(amount); after.IsNegative() {
		return errorf(rule.Unprocessable, "credit_exceeds_charges",
			"a credit of %s %s would take the period below zero: its charges are %s and its adjustments %s, so at most %s can be credited",
			amount.Neg(), currency, b.Charged, b.Adjusted, decimal.Max(b.Total(), decimal.Zero))
	}
	return nil
}
