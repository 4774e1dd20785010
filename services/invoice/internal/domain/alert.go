package domain

import (
	"strings"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/rule"
)

// Alerts (DESIGN.md section 3a): a tenant's threshold on a meter's period
// quantity (usage: the meter's aggregation over the period's charges) or on
// a currency's running total (spend: the open invoice's subtotal so far).
// Each is told once per period, when the figure first reaches it
// (Reached).

// Alert kinds.
const (
	AlertUsage = "usage"
	AlertSpend = "spend"
)

// AlertRequest is POST .../alerts as a client sends it.
type AlertRequest struct {
	Kind, MeterCode, Currency, Threshold string
}

// Alert is a checked alert request: MeterCode set for a usage alert only,
// Currency for a spend alert only.
type Alert struct {
	Kind      string
	MeterCode string
	Currency  string
	Threshold decimal.Decimal
}

// ParseAlert checks an alert request: a kind of usage or spend (400
// missing_field, invalid_kind); a usage alert's meterCode of 1-64 of
// A-Z a-z 0-9 _ . - (400 missing_field, invalid_meter_code) and no currency,
// a spend alert's known, invoiceable currency (400 missing_field,
// unknown_currency; 422 currency_not_invoiceable) and no meterCode (400
// invalid_field); a threshold above zero (400 missing_field,
// invalid_threshold), of at most 18 integer digits (400
// decimal_out_of_range), a usage one of at most 12 decimal places (400
// too_many_decimal_places), a spend one in whole minor units of its
// currency (422 amount_precision).
func ParseAlert(r AlertRequest) (Alert, error) {
	for _, f := range []struct{ name, value string }{{"kind", r.Kind}, {"threshold", r.Threshold}} {
		if strings.TrimSpace(f.value) == "" {
			return Alert{}, rule.Errorf(rule.Invalid, "missing_field", "field %q is required", f.name)
		}
	}
	a := Alert{Kind: r.Kind}
	switch r.Kind {
	case AlertUsage:
		switch {
		case r.MeterCode == "":
			return Alert{}, rule.Errorf(rule.Invalid, "missing_field", "field \"meterCode\" is required for a usage alert")
		case !catalog.ValidKey(r.MeterCode):
			return Alert{}, rule.Errorf(rule.Invalid, "invalid_meter_code", "meterCode must be 1-64 characters of A-Z a-z 0-9 _ . -, got %q", r.MeterCode)
		case r.Currency != "":
			return Alert{}, rule.Errorf(rule.Invalid, "invalid_field", "field \"currency\" belongs to a spend alert, not a usage alert")
		}
		a.MeterCode = r.MeterCode
	case AlertSpend:
		switch {
		case r.Currency == "":
			return Alert{}, rule.Errorf(rule.Invalid, "missing_field", "field \"currency\" is required for a spend alert")
		case r.MeterCode != "":
			return Alert{}, rule.Errorf(rule.Invalid, "invalid_field", "field \"meterCode\" belongs to a usage alert, not a spend alert")
		}
		if _, err := money.Currency(r.Currency); err != nil {
			if code := money.ProblemCode(err); code == money.CodeNotInvoiceable {
				return Alert{}, rule.Errorf(rule.Unprocessable, code, "%v", err)
			}
			return Alert{}, rule.Errorf(rule.Invalid, money.CodeUnknownCurrency, "%v", err)
		}
		a.Currency = r.Currency
	default:
		return Alert{}, rule.Errorf(rule.Invalid, "invalid_kind", "kind must be %q or %q, got %q", AlertUsage, AlertSpend, r.Kind)
	}
	t, err := money.Parse(r.Threshold)
	if err != nil {
		return Alert{}, rule.Errorf(rule.Invalid, "invalid_threshold", "threshold must be a plain decimal string such as \"1000\": %v", err)
	}
	if !t.IsPositive() {
		return Alert{}, rule.Errorf(rule.Invalid, "invalid_threshold", "threshold must be above zero, got %s", t)
	}
	if err := money.CheckRange(t); err != nil {
		return Alert{}, rule.Errorf(rule.Invalid, money.CodeOutOfRange, "threshold: %v", err)
	}
	if a.Kind == AlertUsage {
		if err := money.CheckScale(t); err != nil {
			return Alert{}, rule.Errorf(rule.Invalid, money.CodeTooPrecise, "threshold: %v", err)
		}
	} else if err := money.CheckMinorUnits(t, a.Currency); err != nil {
		return Alert{}, rule.Errorf(rule.Unprocessable, money.CodeAmountPrecision, "threshold: %v", err)
	}
	a.Threshold = t
	return a, nil
}

// Reached reports whether a running figure has reached an alert's
// threshold: at it or above.
func Reached(threshold, figure decimal.Decimal) bool { return figure.GreaterThanOrEqual(threshold) }

// MeterFigure is what a meter's period quantity is computed from, over
// every charge of its period (MeterQuantity).
type MeterFigure struct {
	Aggregation string          // the charges' ("" or sum for charges from before the catalog)
	Sum         decimal.Decimal // of the charges' quantities
	Charges     int64
	Max         decimal.Decimal // the largest of its max lines' figures
	Latest      decimal.Decimal // the figure of its line with the latest charge
	Distinct    int64           // the distinct values across its unique_count lines
}

// MeterQuantity is a meter's period quantity by its aggregation: the sum of
// its charges' quantities, their count, the largest, the latest's, or the
// number of distinct values.
func MeterQuantity(f MeterFigure) decimal.Decimal {
	switch f.Aggregation {
	case catalog.Count:
		return decimal.NewFromInt(f.Charges)
	case catalog.Max:
		return f.Max
	case catalog.Latest:
		return f.Latest
	case catalog.UniqueCount:
		return decimal.NewFromInt(f.Distinct)
	default:
		return f.Sum
	}
}
