package domain

import (
	"fmt"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/rule"
)

// Codes of the plans' refusals.
const (
	// CodeInvalidPlan: a plan version breaks a rule of its own (fees,
	// charges, minimum spend).
	CodeInvalidPlan = "invalid_plan"
	// CodePlanNotFound: no plan of that code.
	CodePlanNotFound = "plan_not_found"
)

// Plan is a validated plan version as sent (section 3a): its fees and
// minimum spend in whole minor units of its currency, each charge's
// pricing valid; its charges' meters and dimensions are checked against
// the catalog when it is published (CheckPlanCharges).
type Plan struct {
	Code, Name, Currency string
	FixedFees            []events.PlanFee
	Charges              []events.PlanCharge
	MinimumSpend         *decimal.Decimal
	// EffectiveAt is when the version applies from; zero: as soon as the
	// schedule allows (Schedule).
	EffectiveAt time.Time
}

// PlanRequest is a plan version as sent: decimals as strings, "" when absent.
type PlanRequest struct {
	Code, Name, Currency, MinimumSpend, EffectiveAt string
	FixedFees                                       []FeeRequest
	Charges                                         []ChargeRequest
}

// FeeRequest is a fixed fee as sent.
type FeeRequest struct{ Code, Name, Amount string }

// ChargeRequest is a usage charge as sent: a meter and a price in any
// model, as an activation takes it.
type ChargeRequest struct {
	MeterCode, Model, UnitPrice, PackageSize, PackagePrice string
	Tiers                                                  []TierRequest
	Dimensions                                             map[string]string
}

// ParsePlan checks a plan version as sent.
func ParsePlan(r PlanRequest) (Plan, error) {
	for _, f := range []struct{ name, value string }{{"code", r.Code}, {"name", r.Name}, {"currency", r.Currency}} {
		if f.value == "" {
			return Plan{}, invalid(CodeMissingField, "field %q is required", f.name)
		}
	}
	if err := CheckPlanCode(r.Code); err != nil {
		return Plan{}, err
	}
	if err := name("name", r.Name); err != nil {
		return Plan{}, err
	}
	if _, err := money.Currency(r.Currency); err != nil {
		if money.ProblemCode(err) == money.CodeNotInvoiceable {
			return Plan{}, rejected(money.CodeNotInvoiceable, "%v", err)
		}
		return Plan{}, invalid(CodeUnknownCurrency, "%v", err)
	}
	p := Plan{Code: r.Code, Name: r.Name, Currency: r.Currency}
	if len(r.FixedFees) > events.MaxPlanFees {
		return Plan{}, invalid(CodeInvalidPlan, "a plan has at most %d fixed fees, got %d", events.MaxPlanFees, len(r.FixedFees))
	}
	seen := map[string]bool{}
	for i, f := range r.FixedFees {
		field := fmt.Sprintf("fixedFees[%d]", i)
		if f.Code == "" || f.Name == "" || f.Amount == "" {
			return Plan{}, invalid(CodeMissingField, "%s needs \"code\", \"name\" and \"amount\"", field)
		}
		if !catalog.ValidKey(f.Code) {
			return Plan{}, invalid(CodeInvalidPlan, "%s.code must be 1-64 characters of A-Z a-z 0-9 _ . -, got %q", field, f.Code)
		}
		if seen[f.Code] {
			return Plan{}, invalid(CodeInvalidPlan, "fixed fee code %q appears twice", f.Code)
		}
		seen[f.Code] = true
		if err := name(field+".name", f.Name); err != nil {
			return Plan{}, err
		}
		amount, err := minorUnits(field+".amount", f.Amount, r.Currency)
		if err != nil {
			return Plan{}, err
		}
		p.FixedFees = append(p.FixedFees, events.PlanFee{Code: f.Code, Name: f.Name, Amount: amount})
	}
	if len(r.Charges) > events.MaxPlanCharges {
		return Plan{}, invalid(CodeInvalidPlan, "a plan has at most %d charges, got %d", events.MaxPlanCharges, len(r.Charges))
	}
	for i, c := range r.Charges {
		if c.MeterCode == "" {
			return Plan{}, invalid(CodeMissingField, "charges[%d] needs \"meterCode\"", i)
		}
		if err := CheckMeterCode(c.MeterCode); err != nil {
			return Plan{}, err
		}
		pr, err := parsePricing(Request{Model: c.Model, UnitPrice: c.UnitPrice, Tiers: c.Tiers,
			PackageSize: c.PackageSize, PackagePrice: c.PackagePrice})
		if err != nil {
			return Plan{}, err
		}
		ch := events.PlanCharge{MeterCode: c.MeterCode, Pricing: pr}
		if len(c.Dimensions) > 0 {
			ch.Dimensions = maps.Clone(c.Dimensions)
		}
		p.Charges = append(p.Charges, ch)
	}
	if r.MinimumSpend != "" {
		m, err := minorUnits("minimumSpend", r.MinimumSpend, r.Currency)
		if err != nil {
			return Plan{}, err
		}
		p.MinimumSpend = &m
	}
	if r.EffectiveAt != "" {
		t, err := ParseTime("effectiveAt", r.EffectiveAt)
		if err != nil {
			return Plan{}, err
		}
		p.EffectiveAt = t
	}
	return p, nil
}

// CheckPlanCode checks a plan code: 1-64 characters of A-Z a-z 0-9 _ . -
func CheckPlanCode(code string) error {
	if !catalog.ValidKey(code) {
		return invalid(CodeInvalidPlan, "a plan code is 1 to 64 of A-Z a-z 0-9 _ . -, got %q", code)
	}
	return nil
}

// PlanNotFound refuses a read of a plan code with no version.
func PlanNotFound(code string) error {
	return rule.Errorf(rule.NotFound, CodePlanNotFound, "no plan %q in the catalog", code)
}

// CheckPlanCharges checks a version's charges against the catalog: each
// charge's meter is defined (meters of every code it names, nil for one
// not in the catalog: meter_not_found), its dimensions are its meter's
// (invalid_dimensions), and no two charges of a meter could match the
// same fact with as many dimensions, or name the same values
// (ambiguous_price).
func CheckPlanCharges(charges []events.PlanCharge, meters map[string]*catalog.Meter) error {
	for i, c := range charges {
		m := meters[c.MeterCode]
		if m == nil {
			return rule.Errorf(rule.Unprocessable, CodeMeterNotFound,
				"charges[%d]: no meter %q in the catalog: define it first (POST /v1/meters)", i, c.MeterCode)
		}
		if err := catalog.ValidateDimensions(*m, c.Dimensions); err != nil {
			return err
		}
		for _, o := range charges[:i] {
			if o.MeterCode == c.MeterCode && (catalog.Overlap(c.Dimensions, o.Dimensions) || catalog.Same(c.Dimensions, o.Dimensions)) {
				return rule.Errorf(rule.Conflict, CodeAmbiguousPrice,
					"two charges of meter %s, for %s and for %s, could both match a fact with as many dimensions: make one more specific",
					c.MeterCode, catalog.String(c.Dimensions), catalog.String(o.Dimensions))
			}
		}
	}
	return nil
}

// Schedule places the plan version after its code's versions, as
// Activation.Schedule places a price version in its series: prev is the
// latest version's effectiveAt (nil for the first), knownThrough the plans'
// published watermark (nil: none).
func (p Plan) Schedule(publishedAt time.Time, prev, knownThrough *time.Time) (time.Time, error) {
	return Activation{EffectiveAt: p.EffectiveAt}.Schedule(publishedAt, prev, knownThrough)
}

// name checks a display name: 1-200 characters without control characters.
func name(field, s string) error {
	if n := utf8.RuneCountInString(s); !utf8.ValidString(s) || n < 1 || n > 200 {
		return invalid(CodeInvalidField, "field %q must be 1-200 characters of UTF-8", field)
	}
	if err := rule.FreeText(field, s); err != nil {
		return err
	}
	return nil
}

// minorUnits reads a non-negative amount in whole minor units of currency,
// of at most money.MaxIntegerDigits digits before the point
// (decimal_out_of_range, as every other amount).
func minorUnits(field, s, currency string) (decimal.Decimal, error) {
	d, err := money.Parse(s)
	if err != nil {
		return decimal.Decimal{}, invalid(CodeInvalidPlan, "%s %q: %v", field, s, err)
	}
	if d.IsNegative() {
		return decimal.Decimal{}, invalid(CodeInvalidPlan, "%s %s must not be negative", field, s)
	}
	if err := money.CheckRange(d); err != nil {
		return decimal.Decimal{}, invalid(money.CodeOutOfRange, "%s: %v", field, err)
	}
	if err := money.CheckMinorUnits(d, currency); err != nil {
		return decimal.Decimal{}, invalid(money.CodeAmountPrecision, "%s: %v", field, err)
	}
	return d, nil
}
