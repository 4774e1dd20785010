package domain

import (
	"errors"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/money"
)

func TestCheckCorrection(t *testing.T) {
	d := decimal.RequireFromString
	for _, tc := range []struct {
		name, amount, currency, total, corrected string
		want                                     string // "", "exceeds", "precision", "currency"
	}{
		{"a credit within the total", "-4", "USD", "10", "0", ""},
		{"down to exactly zero", "-6", "USD", "10", "-4", ""},
		{"a cent below zero", "-6.01", "USD", "10", "-4", "exceeds"},
		{"a debit", "0.01", "USD", "0", "0", ""},
		{"half a cent", "-0.005", "USD", "10", "0", "precision"},
		{"half a cent of a debit", "0.005", "USD", "10", "0", "precision"},
		{"a won", "-1", "KRW", "1", "0", ""},
		{"half a won", "-0.5", "KRW", "1", "0", "precision"},
		{"gold", "-1", "XAU", "10", "0", "currency"},
	} {
		err := CheckCorrection(d(tc.amount), tc.currency, d(tc.total), d(tc.corrected))
		var exceeds *CreditExceedsInvoiceError
		got := ""
		switch {
		case err == nil:
		case errors.As(err, &exceeds):
			got = "exceeds"
		case errors.Is(err, money.ErrAmountPrecision):
			got = "precision"
		case money.ProblemCode(err) != "":
			got = "currency"
		default:
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: %v (%q), want %q", tc.name, err, got, tc.want)
		}
	}
}
