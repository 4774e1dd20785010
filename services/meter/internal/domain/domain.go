// Package domain holds the meter's rules: what a valid price activation is
// and where a new version may sit in its series' schedule. It knows nothing
// of HTTP, Kafka or SQL.
package domain

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/rule"
)

// Error is a broken rule with a stable machine-readable code (pkg/rule): a
// malformed request is rule.Invalid (400), a well-formed one a business rule
// refuses rule.Unprocessable (422).
type Error = rule.Error

func invalid(code, format string, args ...any) *Error {
	return rule.Errorf(rule.Invalid, code, format, args...)
}

func rejected(code, format string, args ...any) *Error {
	return rule.Errorf(rule.Unprocessable, code, format, args...)
}

// Codes of the errors this package returns.
const (
	CodeMissingField     = "missing_field"
	CodeInvalidField     = "invalid_field"
	CodeInvalidMeterCode = "invalid_meter_code"
	CodeInvalidPrice     = "invalid_price"
	CodeUnknownCurrency  = "unknown_currency"
	CodePriceBackdated   = "price_backdated"
	CodePriceOutOfOrder  = "price_out_of_order"
	// CodeSchedulePublished: effectiveAt is at or before the watermark
	// already published for the series (decision 0011).
	CodeSchedulePublished = "schedule_already_published"
	// CodeLimitExceeded: a new price series, price entry or version of a
	// month past the tenant's limit (METER_MAX_PRICE_SERIES,
	// METER_MAX_PRICE_ENTRIES, METER_MAX_PRICE_VERSIONS_PER_MONTH), or a
	// plan's version of a month past METER_MAX_PLAN_VERSIONS_PER_MONTH.
	CodeLimitExceeded = "limit_exceeded"
)

// SeriesLimitExceeded refuses a tenant's price series past max.
func SeriesLimitExceeded(tenantID string, max int) *Error {
	return rejected(CodeLimitExceeded,
		"tenant %s has %d price series (a meter and a currency each), the most it may have (METER_MAX_PRICE_SERIES): price an existing series instead",
		tenantID, max)
}

// EntryLimitExceeded refuses a tenant's price entry (a series' dimension
// set) past max.
func EntryLimitExceeded(tenantID string, max int) *Error {
	return rejected(CodeLimitExceeded,
		"tenant %s has %d price entries (a dimension set of a series, its default included), the most it may have (METER_MAX_PRICE_ENTRIES): price an existing dimension set instead",
		tenantID, max)
}

// MonthlyVersionLimitExceeded refuses a tenant's price version past max
// taking effect in month (UTC, YYYY-MM).
func MonthlyVersionLimitExceeded(tenantID string, max int, month string) *Error {
	return rejected(CodeLimitExceeded,
		"tenant %s has %d price versions taking effect in %s (UTC), the most one month may have (METER_MAX_PRICE_VERSIONS_PER_MONTH): take this one effect in a later month",
		tenantID, max, month)
}

// PlanVersionLimitExceeded refuses a version of plan code past max taking
// effect in month (UTC, YYYY-MM).
func PlanVersionLimitExceeded(code string, max int, month string) *Error {
	return rejected(CodeLimitExceeded,
		"plan %s has %d versions taking effect in %s (UTC), the most one month may have (METER_MAX_PLAN_VERSIONS_PER_MONTH): take this one effect in a later month",
		code, max, month)
}

var meterCodeRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// CheckMeterCode checks a meter code: 1-64 characters of A-Z a-z 0-9 _ . -
func CheckMeterCode(code string) error {
	if !meterCodeRE.MatchString(code) {
		return invalid(CodeInvalidMeterCode, "meterCode must be 1-64 characters of A-Z a-z 0-9 _ . -, got %q", code)
	}
	return nil
}

// Activation is a validated request to activate the next price version of
// a series.
type Activation struct {
	MeterCode string
	Currency  string
	// Pricing is the version's pricing function (package pricing), valid.
	Pricing pricing.Pricing
	// EffectiveAt is when the price applies from; zero means from the
	// activation itself.
	EffectiveAt time.Time
	// Dimensions are the property values the price applies to, nil for the
	// series' default; checked against the catalog meter at activation
	// (CheckDimensionPrice).
	Dimensions map[string]string
}

// Request is an activation as sent: decimal strings, "" when absent.
// Model "" is unit (a request with unitPrice alone, as before the other
// models).
type Request struct {
	MeterCode, Currency, Model, UnitPrice, EffectiveAt string
	Tiers                                              []TierRequest
	PackageSize, PackagePrice                          string
	// Dimensions are the price's {name: value}; empty for none.
	Dimensions map[string]string
}

// TierRequest is one tier as sent; UpTo "" is the open, last tier.
type TierRequest struct {
	UpTo, UnitPrice, FlatFee string
}

// ParseActivation checks an activation as sent: the meter, the currency,
// the pricing of its model (pricing.Pricing.Validate's codes) and
// effectiveAt, which may be empty.
func ParseActivation(r Request) (Activation, error) {
	switch {
	case r.MeterCode == "":
		return Activation{}, invalid(CodeMissingField, `field "meterCode" is required`)
	case r.Currency == "":
		return Activation{}, invalid(CodeMissingField, `field "currency" is required`)
	}
	if err := CheckMeterCode(r.MeterCode); err != nil {
		return Activation{}, err
	}
	if _, err := money.Currency(r.Currency); err != nil {
		if money.ProblemCode(err) == money.CodeNotInvoiceable { // XAU, XTS, XXX, fund codes
			return Activation{}, rejected(money.CodeNotInvoiceable, "%v", err)
		}
		return Activation{}, invalid(CodeUnknownCurrency, "%v", err)
	}
	p, err := parsePricing(r)
	if err != nil {
		return Activation{}, err
	}
	a := Activation{MeterCode: r.MeterCode, Currency: r.Currency, Pricing: p}
	if len(r.Dimensions) > 0 {
		a.Dimensions = maps.Clone(r.Dimensions)
	}
	if r.EffectiveAt != "" {
		t, err := ParseTime("effectiveAt", r.EffectiveAt)
		if err != nil {
			return Activation{}, err
		}
		a.EffectiveAt = t
	}
	return a, nil
}

// parsePricing reads the pricing fields as decimals and validates them.
func parsePricing(r Request) (pricing.Pricing, error) {
	p := pricing.Pricing{Model: r.Model}
	if p.Model == "" {
		p.Model = pricing.Unit
	}
	if p.Model == pricing.Unit && r.UnitPrice == "" {
		return pricing.Pricing{}, invalid(CodeMissingField, `field "unitPrice" is required`)
	}
	var err error
	if p.UnitPrice, err = optDecimal("unitPrice", r.UnitPrice, CodeInvalidPrice); err != nil {
		return pricing.Pricing{}, err
	}
	if p.PackageSize, err = optDecimal("packageSize", r.PackageSize, pricing.CodeInvalidPackage); err != nil {
		return pricing.Pricing{}, err
	}
	if p.PackagePrice, err = optDecimal("packagePrice", r.PackagePrice, CodeInvalidPrice); err != nil {
		return pricing.Pricing{}, err
	}
	for i, t := range r.Tiers {
		var tier pricing.Tier
		if tier.UpTo, err = optDecimal(fmt.Sprintf("tiers[%d].upTo", i), t.UpTo, pricing.CodeInvalidTierBound); err != nil {
			return pricing.Pricing{}, err
		}
		for _, f := range []struct {
			name, text string
			to         *decimal.Decimal
		}{{"unitPrice", t.UnitPrice, &tier.UnitPrice}, {"flatFee", t.FlatFee, &tier.FlatFee}} {
			v, err := optDecimal(fmt.Sprintf("tiers[%d].%s", i, f.name), f.text, CodeInvalidPrice)
			if err != nil {
				return pricing.Pricing{}, err
			}
			if v != nil {
				*f.to = *v
			}
		}
		if t.UnitPrice == "" {
			return pricing.Pricing{}, invalid(CodeMissingField, "tiers[%d] needs \"unitPrice\"", i)
		}
		p.Tiers = append(p.Tiers, tier)
	}
	if err := p.Validate(); err != nil {
		var pe *pricing.Error
		if errors.As(err, &pe) {
			return pricing.Pricing{}, invalid(pe.Code, "%s", pe.Detail)
		}
		return pricing.Pricing{}, err
	}
	return p, nil
}

// optDecimal reads a decimal string; "" is nil. A negative one is left to
// Validate, which says which rule it breaks.
func optDecimal(field, s, code string) (*decimal.Decimal, error) {
	if s == "" {
		return nil, nil
	}
	v, err := money.Parse(s)
	if err != nil {
		return nil, invalid(code, "%s %q: %v", field, s, err)
	}
	return &v, nil
}

// MinYear and MaxYear bound the years of a time a request may name
// (rule.Time).
const (
	MinYear = rule.MinYear
	MaxYear = rule.MaxYear
)

// MaxScheduleAhead is how far after its activation a price version may take
// effect: a version scheduled further ahead would hold back every later one.
const MaxScheduleAhead = 10 * 365 * 24 * time.Hour

// CodeEffectiveTooFar: effectiveAt more than MaxScheduleAhead after the
// activation.
const CodeEffectiveTooFar = "effective_at_too_far"

// ParseTime reads an RFC 3339 time, in UTC and truncated to microseconds
// (what PostgreSQL keeps): rule.Time.
func ParseTime(field, s string) (time.Time, error) {
	t, err := rule.Time(field, s)
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}

// Instant is t in UTC, truncated to microseconds.
func Instant(t time.Time) time.Time { return rule.Instant(t) }

// Schedule places the activation in its series. activatedAt is now; prev is
// the effectiveAt of the series' latest version, nil for the first;
// knownThrough is the series' published watermark, nil when none was
// published. It returns the new version's effectiveAt: the one requested,
// or activatedAt — or, when the schedule is already published through
// activatedAt, the first instant after the watermark.
//
// A price may not apply before it was activated (no backdating: a past price
// is corrected by an adjustment), nor before the version it follows, nor at
// or before a published watermark: raters have been told that nothing
// changes until then, and may have rated usage on that promise.
func (a Activation) Schedule(activatedAt time.Time, prev, knownThrough *time.Time) (time.Time, error) {
	activatedAt = Instant(activatedAt)
	eff := a.EffectiveAt
	if eff.IsZero() {
		eff = activatedAt
		if knownThrough != nil && !eff.After(*knownThrough) {
			eff = Instant(*knownThrough).Add(time.Microsecond)
		}
	}
	if eff.Before(activatedAt) {
		return time.Time{}, rejected(CodePriceBackdated,
			"effectiveAt %s is before the activation time %s: a price cannot be backdated",
			eff.Format(time.RFC3339Nano), activatedAt.Format(time.RFC3339Nano))
	}
	if eff.After(activatedAt.Add(MaxScheduleAhead)) {
		return time.Time{}, rejected(CodeEffectiveTooFar,
			"effectiveAt %s is more than 10 years after the activation time %s",
			eff.Format(time.RFC3339Nano), activatedAt.Format(time.RFC3339Nano))
	}
	if knownThrough != nil && !eff.After(*knownThrough) {
		return time.Time{}, rejected(CodeSchedulePublished,
			"effectiveAt %s is not after %s, the time through which this price schedule is already published to raters: "+
				"a new version must take effect after it (omit effectiveAt to take effect as soon as possible)",
			eff.Format(time.RFC3339Nano), knownThrough.UTC().Format(time.RFC3339Nano))
	}
	if prev != nil && eff.Before(*prev) {
		return time.Time{}, rejected(CodePriceOutOfOrder,
			"effectiveAt %s is before %s, when the previous version takes effect",
			eff.Format(time.RFC3339Nano), prev.UTC().Format(time.RFC3339Nano))
	}
	return eff, nil
}

// Watermark is the watermark to publish for a series at now, with a lead:
// now + lead, but never below the one already published.
func Watermark(now time.Time, lead time.Duration, published *time.Time) time.Time {
	w := Instant(now).Add(lead)
	if published != nil && published.After(w) {
		return Instant(*published)
	}
	return w
}
