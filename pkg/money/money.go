// Package money holds the exact-decimal rules every service shares: parsing
// amounts and quantities from decimal strings, currency codes and their minor
// units, and the one rounding the system does (half-even, at invoice issue).
package money

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/shopspring/decimal"
	"golang.org/x/text/currency"
)

// MaxDigits bounds the digits of an accepted decimal, so that a request
// cannot smuggle in a number Postgres NUMERIC columns or clients cannot hold.
const MaxDigits = 38

var decimalText = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)

// ErrNotDecimal is returned for text that is not a plain decimal number.
var ErrNotDecimal = errors.New("not a decimal number: use digits with an optional '.' fraction, no exponent")

// Parse reads a plain decimal string such as "12.50" or "-3". It refuses
// exponents, leading '+', leading zeros, blanks, and more than MaxDigits
// digits.
func Parse(s string) (decimal.Decimal, error) {
	if !decimalText.MatchString(s) {
		return decimal.Decimal{}, ErrNotDecimal
	}
	digits := 0
	for _, r := range s {
		if r >= '0' && r <= '9' {
			digits++
		}
	}
	if digits > MaxDigits {
		return decimal.Decimal{}, fmt.Errorf("more than %d digits", MaxDigits)
	}
	return decimal.RequireFromString(s), nil
}

// ParseNonNegative is Parse that also refuses negative values.
func ParseNonNegative(s string) (decimal.Decimal, error) {
	d, err := Parse(s)
	if err != nil {
		return d, err
	}
	if d.IsNegative() {
		return decimal.Decimal{}, errors.New("must not be negative")
	}
	return d, nil
}

// Currency checks an ISO 4217 code ("USD", "KRW") and returns its minor-unit
// scale: 2 for USD, 0 for KRW.
func Currency(code string) (scale int32, err error) {
	if len(code) != 3 || code[0] < 'A' || code[0] > 'Z' || code[1] < 'A' || code[1] > 'Z' || code[2] < 'A' || code[2] > 'Z' {
		return 0, fmt.Errorf("unknown currency %q: want an upper-case ISO 4217 code", code)
	}
	u, err := currency.ParseISO(code)
	if err != nil {
		return 0, fmt.Errorf("unknown currency %q", code)
	}
	s, _ := currency.Standard.Rounding(u)
	return int32(s), nil
}

// Round rounds an amount to the currency's minor unit, half to even.
func Round(amount decimal.Decimal, code string) (decimal.Decimal, error) {
	scale, err := Currency(code)
	if err != nil {
		return decimal.Decimal{}, err
	}
	return amount.RoundBank(scale), nil
}
