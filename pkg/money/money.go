// Package money holds the exact-decimal rules every service shares: parsing
// amounts and quantities from decimal strings, currency codes and their minor
// units from the ISO 4217 table kept in this package (iso4217.go), the one
// rounding the system does (half-even, at invoice issue), and the check that
// an amount is in whole minor units (what is issued after an invoice).
package money

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/shopspring/decimal"
)

// MaxDigits bounds the digits of an accepted decimal, so that a request
// cannot smuggle in a number Postgres NUMERIC columns or clients cannot hold.
const MaxDigits = 38

var decimalText = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)

// ErrNotDecimal is returned for text that is not a plain decimal number.
var ErrNotDecimal = errors.New("not a decimal number: use digits with an optional '.' fraction, no exponent")

// Parse reads a plain decimal string such as "12.50" or "-3". It refuses
// exponents, leading '+', leading zeros, blanks, a signed zero ("-0",
// "-0.00": ErrNegativeZero) and more than MaxDigits digits.
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
	d := decimal.RequireFromString(s)
	if s[0] == '-' && d.IsZero() {
		return decimal.Decimal{}, ErrNegativeZero
	}
	return d, nil
}

// The business bounds of a quantity, a price or an amount a request may
// give: at most MaxIntegerDigits digits before the point (below 10^18, a
// quintillion) and, for quantities and prices, at most MaxScale decimal
// places (amounts have their currency's minor unit, CheckMinorUnits). A
// unit-priced charge, quantity times price, then stays below 10^36 with at
// most 24 decimal places, where Parse's 38 digits let it reach 76 digits;
// the other models are bounded by the same inputs (tiers: at most 20 such
// products and fees; packages: the package count, at most quantity over
// the smallest package size, times the package price).
const (
	MaxIntegerDigits = 18
	MaxScale         = 12
)

// Problem codes of the bounds, stable across the services' APIs (400).
const (
	// CodeOutOfRange: more than MaxIntegerDigits digits before the point.
	CodeOutOfRange = "decimal_out_of_range"
	// CodeTooPrecise: more than MaxScale decimal places (the code of
	// pricing's own scale rule).
	CodeTooPrecise = "too_many_decimal_places"
)

var (
	// ErrOutOfRange: a value of more than MaxIntegerDigits integer digits.
	ErrOutOfRange = errors.New("out of range")
	// ErrTooPrecise: a value of more than MaxScale decimal places.
	ErrTooPrecise = errors.New("too many decimal places")
)

var integerBound = decimal.New(1, MaxIntegerDigits)

// CheckRange refuses d with more than MaxIntegerDigits digits before the
// point (|d| >= 10^18), wrapping ErrOutOfRange.
func CheckRange(d decimal.Decimal) error {
	if d.Abs().Cmp(integerBound) >= 0 {
		return fmt.Errorf("%w: %s has more than %d digits before the point", ErrOutOfRange, clipDecimal(d), MaxIntegerDigits)
	}
	return nil
}

// CheckScale refuses d with more than MaxScale significant decimal places
// (trailing zeros do not count), wrapping ErrTooPrecise.
func CheckScale(d decimal.Decimal) error {
	if !d.Equal(d.Truncate(MaxScale)) {
		return fmt.Errorf("%w: %s has more than %d decimal places", ErrTooPrecise, clipDecimal(d), MaxScale)
	}
	return nil
}

// ParseQuantity reads a quantity: ParseNonNegative within the bounds
// (CheckRange, CheckScale).
func ParseQuantity(s string) (decimal.Decimal, error) {
	d, err := ParseNonNegative(s)
	if err != nil {
		return d, err
	}
	if err := CheckRange(d); err != nil {
		return decimal.Decimal{}, err
	}
	if err := CheckScale(d); err != nil {
		return decimal.Decimal{}, err
	}
	return d, nil
}

// BoundsCode is the problem code of an error of CheckRange, CheckScale or
// ParseQuantity's bounds: decimal_out_of_range or too_many_decimal_places;
// "" for any other error.
func BoundsCode(err error) string {
	switch {
	case errors.Is(err, ErrOutOfRange):
		return CodeOutOfRange
	case errors.Is(err, ErrTooPrecise):
		return CodeTooPrecise
	default:
		return ""
	}
}

func clipDecimal(d decimal.Decimal) string {
	s := d.String()
	if len(s) > 24 {
		return s[:24] + "..."
	}
	return s
}

// ErrNegativeZero is returned for "-0" and "-0.00": zero has no sign.
var ErrNegativeZero = errors.New(`a signed zero ("-0"): write zero without a sign`)

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

// Problem codes of the currency and precision rules, stable across the
// services' APIs.
const (
	CodeUnknownCurrency = "unknown_currency"
	CodeNotInvoiceable  = "currency_not_invoiceable"
	CodeAmountPrecision = "amount_precision"
)

var (
	// ErrUnknownCurrency: not an active ISO 4217 alphabetic code.
	ErrUnknownCurrency = errors.New("unknown currency")
	// ErrNotInvoiceable: an ISO 4217 code that is not a circulating
	// currency (a fund code, a unit of account, a precious metal, XTS or
	// XXX): no price, charge or invoice can be in it.
	ErrNotInvoiceable = errors.New("not a currency an invoice can be in")
	// ErrAmountPrecision: an amount finer than its currency's minor unit
	// where only whole minor units are allowed.
	ErrAmountPrecision = errors.New("finer than the currency's minor unit")
)

// Currency checks a currency an invoice can be in ("USD", "KRW") against the
// ISO 4217 table and returns its minor unit, the scale amounts are rounded
// to: 2 for USD, 0 for KRW and JPY, 3 for BHD, IQD and KWD, 4 for CLF. A code
// that is not in the table wraps ErrUnknownCurrency; a code of the table
// that is not a circulating currency (XAU, XTS, XXX, CLF, ...) wraps
// ErrNotInvoiceable.
func Currency(code string) (scale int32, err error) {
	c, ok := byCode[code]
	if !ok {
		return 0, fmt.Errorf("%w %q: want an upper-case active ISO 4217 code such as \"USD\"", ErrUnknownCurrency, clip(code))
	}
	if c.Kind != Tender {
		return 0, fmt.Errorf("%w: %s (%s) is a %s, not a currency an invoice can be in", ErrNotInvoiceable, c.Code, c.Name, c.Kind)
	}
	return c.MinorUnits, nil
}

// ProblemCode is the stable problem code of an error of Currency or
// CheckMinorUnits: unknown_currency, currency_not_invoiceable or
// amount_precision; "" for any other error.
func ProblemCode(err error) string {
	switch {
	case errors.Is(err, ErrUnknownCurrency):
		return CodeUnknownCurrency
	case errors.Is(err, ErrNotInvoiceable):
		return CodeNotInvoiceable
	case errors.Is(err, ErrAmountPrecision):
		return CodeAmountPrecision
	default:
		return ""
	}
}

// Round rounds an amount to the currency's minor unit, half to even.
func Round(amount decimal.Decimal, code string) (decimal.Decimal, error) {
	scale, err := Currency(code)
	if err != nil {
		return decimal.Decimal{}, err
	}
	return amount.RoundBank(scale), nil
}

// Prorate is amount x days / periodDays rounded half-even to the
// currency's minor unit, exactly (no intermediate rounding): a plan's fee
// or minimum spend for the whole days of a period it was in effect
// (DESIGN.md section 3a).
func Prorate(amount decimal.Decimal, days, periodDays int, code string) (decimal.Decimal, error) {
	scale, err := Currency(code)
	if err != nil {
		return decimal.Decimal{}, err
	}
	if periodDays <= 0 || days < 0 || days > periodDays {
		return decimal.Decimal{}, fmt.Errorf("prorate %d of %d days", days, periodDays)
	}
	n := decimal.NewFromInt(int64(periodDays))
	q, r := amount.Mul(decimal.NewFromInt(int64(days))).QuoRem(n, scale) // x = n*q + r, |r| < n*10^-scale
	ulp := decimal.New(1, -scale)
	twice, half := r.Abs().Mul(decimal.NewFromInt(2)), n.Mul(ulp)
	if c := twice.Cmp(half); c > 0 || (c == 0 && !q.Shift(scale).Mod(decimal.NewFromInt(2)).IsZero()) {
		if r.Sign() < 0 {
			return q.Sub(ulp), nil
		}
		return q.Add(ulp), nil
	}
	return q, nil
}

// CheckMinorUnits checks that amount is a whole number of the currency's
// minor units (-0.01 USD, -1 JPY; not -0.005 USD or -0.5 JPY). Trailing
// zeros do not count: "1.50" USD and "10.00" JPY are whole. It wraps
// ErrAmountPrecision, or the error of Currency.
func CheckMinorUnits(amount decimal.Decimal, code string) error {
	scale, err := Currency(code)
	if err != nil {
		return err
	}
	if !amount.Truncate(scale).Equal(amount) {
		return fmt.Errorf("%w: %s %s has more decimals than the %d of its minor unit (ISO 4217)",
			ErrAmountPrecision, amount, code, scale)
	}
	return nil
}

// clip shortens a client's text quoted back in an error.
func clip(s string) string {
	const max = 16
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "..."
	}
	return s
}
