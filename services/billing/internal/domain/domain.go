// Package domain holds billing's pure rules: which period a charge belongs
// to, the exact charge amount, what a valid adjustment and a closable period
// are. It knows nothing of HTTP, Kafka or SQL.
package domain

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/rule"
)

// Period statuses. An open period takes charges; from the first step of its
// close on ("closing") new usage of it is late and goes to a later period;
// "closed" is final.
const (
	StatusOpen    = "open"
	StatusClosing = "closing"
	StatusClosed  = "closed"
)

// Error is a domain rule broken by a request, with a stable code (pkg/rule):
// invalid input is rule.Invalid (400), a referenced thing that does not
// exist for the tenant rule.NotFound (404), well-formed input that breaks a
// rule rule.Unprocessable (422). The HTTP layer maps the kind to a status.
type Error = rule.Error

func errorf(kind rule.Kind, code, format string, args ...any) *Error {
	return rule.Errorf(kind, code, format, args...)
}

// Amount is the exact amount of a charge: quantity x unit price, no rounding.
func Amount(quantity, unitPrice decimal.Decimal) decimal.Decimal {
	return quantity.Mul(unitPrice)
}

// NextPeriod returns the calendar month after period ("2026-12" -> "2027-01").
// period must be valid.
func NextPeriod(period string) string {
	t, err := events.ParsePeriod(period)
	if err != nil {
		panic(fmt.Sprintf("next period of %q: %v", period, err))
	}
	return events.Period(t.AddDate(0, 1, 0))
}

// RatingPeriod returns the period a usage fact of period occurred is rated
// into, given the tenant's periods from occurred on that no longer take
// charges (closing or closed), in order: occurred itself when there are
// none, else the period after the last of them, and then the charge is
// late. Periods close in order (decision 0014), so a period before one
// that is closing or closed takes no more charges either, even one that
// never had any.
func RatingPeriod(occurred string, notOpen []string) (period string, late bool) {
	if len(notOpen) == 0 {
		return occurred, false
	}
	return NextPeriod(slices.Max(notOpen)), true
}

// CheckEarlierClosed refuses the close of period while an earlier period of
// the tenant with something to bill (earliestOpen, "" when none) is not
// closed: periods close in order, so invoices are numbered and credit
// grants drawn in period order (decision 0014).
func CheckEarlierClosed(period, earliestOpen string) error {
	if earliestOpen != "" {
		return errorf(rule.Unprocessable, CodeEarlierPeriodOpen,
			"period %s cannot close before %s: the tenant's periods close in order; close %s first", period, earliestOpen, earliestOpen)
	}
	return nil
}

// CodeEarlierPeriodOpen is the code of CheckEarlierClosed's refusal.
const CodeEarlierPeriodOpen = "earlier_period_open"

// MinPeriodYear and MaxPeriodYear bound the periods a request may name:
// "0000-01" or "9999-12" are no billing periods (events.ParsePeriod's
// range, rule.MinYear to rule.MaxYear).
const (
	MinPeriodYear = rule.MinYear
	MaxPeriodYear = rule.MaxYear
)

// ParsePeriod checks a period from a request ("2026-11"): a calendar month
// YYYY-MM of a year from MinPeriodYear to MaxPeriodYear.
func ParsePeriod(s string) (string, error) {
	t, err := events.ParsePeriod(s)
	if err != nil {
		return "", errorf(rule.Invalid, "invalid_period", "period must be a calendar month YYYY-MM, got %q", clip(s))
	}
	if y := t.Year(); y < MinPeriodYear || y > MaxPeriodYear {
		return "", errorf(rule.Invalid, "invalid_period", "period %s: year %d is out of range (%d to %d)", s, y, MinPeriodYear, MaxPeriodYear)
	}
	return s, nil
}

// ClosablePeriod checks that period can be closed at now: a valid month that
// has begun in some time zone (UTC+14 is the most ahead); whether it has
// begun in the tenant's own zone is CheckBegun's (the current month may be
// closed early; a future one not).
func ClosablePeriod(s string, now time.Time) (string, error) {
	p, err := ParsePeriod(s)
	if err != nil {
		return "", err
	}
	if p > events.Period(now.Add(14*time.Hour)) {
		return "", errorf(rule.Unprocessable, "period_in_future", "period %s has not begun yet", p)
	}
	return p, nil
}

// CheckBegun refuses a period after current, the tenant's period in
// progress (period_in_future).
func CheckBegun(period, current string) error {
	if period > current {
		return errorf(rule.Unprocessable, "period_in_future", "period %s has not begun yet (the tenant's period in progress is %s)", period, current)
	}
	return nil
}

// MaxReasonLength is the longest adjustment reason, in characters.
const MaxReasonLength = 500

// AdjustmentRequest is an adjustment as a client sends it.
type AdjustmentRequest struct {
	CorrectionOf string
	Amount       string
	Currency     string
	Reason       string
}

// Adjustment is a checked adjustment request.
type Adjustment struct {
	CorrectionOf uuid.UUID
	Amount       decimal.Decimal
	Currency     string
	Reason       string
}

// ParseAdjustment checks an adjustment request: every field present,
// correctionOf a charge id, amount a plain non-zero decimal (negative
// credits) in whole minor units of its currency (amount_precision), a
// currency an invoice can be in (ISO 4217: unknown_currency,
// currency_not_invoiceable), a reason of 1 to MaxReasonLength characters
// without control characters (control_character).
// Whether the charge exists and has that currency is checked against the
// charge (see CheckAdjustment).
func ParseAdjustment(r AdjustmentRequest) (Adjustment, error) {
	for _, f := range []struct{ name, value string }{
		{"correctionOf", r.CorrectionOf}, {"amount", r.Amount}, {"currency", r.Currency}, {"reason", r.Reason},
	} {
		if strings.TrimSpace(f.value) == "" {
			return Adjustment{}, errorf(rule.Invalid, "missing_field", "field %q is required", f.name)
		}
	}
	var a Adjustment
	id, err := uuid.Parse(r.CorrectionOf)
	if err != nil || len(r.CorrectionOf) != 36 {
		return Adjustment{}, errorf(rule.Invalid, "invalid_field", "correctionOf must be a charge id (UUID), got %q", clip(r.CorrectionOf))
	}
	a.CorrectionOf = id
	if a.Amount, err = money.Parse(r.Amount); err != nil {
		return Adjustment{}, errorf(rule.Invalid, "invalid_amount", "amount must be a plain decimal string such as \"-12.50\": %v", err)
	}
	if a.Amount.IsZero() {
		return Adjustment{}, errorf(rule.Invalid, "invalid_amount", "amount must not be zero")
	}
	if err := money.CheckRange(a.Amount); err != nil {
		return Adjustment{}, errorf(rule.Invalid, money.CodeOutOfRange, "amount: %v", err)
	}
	if _, err := money.Currency(r.Currency); err != nil {
		return Adjustment{}, currencyError(err)
	}
	a.Currency = r.Currency
	if err := money.CheckMinorUnits(a.Amount, a.Currency); err != nil {
		// Decision 0008: whole minor units only, so that a correction
		// note is exactly its adjustment.
		return Adjustment{}, errorf(rule.Unprocessable, money.CodeAmountPrecision, "%v", err)
	}
	if n := utf8.RuneCountInString(r.Reason); n > MaxReasonLength {
		return Adjustment{}, errorf(rule.Invalid, "invalid_field", "reason must be at most %d characters, got %d", MaxReasonLength, n)
	}
	if e := rule.FreeText("reason", r.Reason); e != nil {
		return Adjustment{}, e
	}
	a.Reason = r.Reason
	return a, nil
}

// currencyError maps a money.Currency error to its problem: a code that is
// not an active ISO 4217 code is invalid (400 unknown_currency), one that is
// but names no circulating currency (XAU, XTS, XXX, fund codes) is
// unprocessable (422 currency_not_invoiceable).
func currencyError(err error) error {
	if code := money.ProblemCode(err); code == money.CodeNotInvoiceable {
		return errorf(rule.Unprocessable, code, "%v", err)
	}
	return errorf(rule.Invalid, money.CodeUnknownCurrency, "%v", err)
}

// CheckAdjustment checks an adjustment against the charge it corrects.
func CheckAdjustment(a Adjustment, chargeCurrency string) error {
	if a.Currency != chargeCurrency {
		return errorf(rule.Unprocessable, "currency_mismatch", "adjustment currency %s differs from the charge's %s", a.Currency, chargeCurrency)
	}
	return nil
}

// AdjustmentLimitExceeded refuses an adjustment that would give a tenant's
// period more than max adjustments, posted before or after its close: every
// statement that sums a period's adjustments (its close, a credit's balance,
// the invoice's corrections) reads at most that many.
func AdjustmentLimitExceeded(tenantID, period string, max int) error {
	return errorf(rule.Unprocessable, CodeLimitExceeded,
		"period %s of tenant %s has %d adjustments, the most one period may have (BILLING_MAX_ADJUSTMENTS)",
		period, tenantID, max)
}

// ChargeNotFound is the error for a correctionOf that names no charge of the
// tenant.
func ChargeNotFound(id uuid.UUID) error {
	return errorf(rule.NotFound, "charge_not_found", "no charge %s for this tenant", id)
}

// clip shortens a client's text quoted back in an error detail.
func clip(s string) string {
	const max = 64
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "..."
	}
	return s
}
