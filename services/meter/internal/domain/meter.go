package domain

import (
	"fmt"
	"slices"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/rule"
)

// Codes of the catalog's refusals besides pkg/catalog's (invalid_meter,
// invalid_dimensions).
const (
	// CodeMeterExists: a meter of that code is defined with other content
	// (a meter never changes once defined).
	CodeMeterExists = "meter_exists"
	// CodeEventTypeTaken: another meter is fed by that eventType.
	CodeEventTypeTaken = "event_type_taken"
	// CodeAmbiguousPrice: a dimension price that could match the same fact
	// as another of its series with as many dimensions.
	CodeAmbiguousPrice = "ambiguous_price"
	// CodeMeterNotFound: no meter of that code in the catalog.
	CodeMeterNotFound = "meter_not_found"
)

// MeterRequest is a definition as sent.
type MeterRequest struct {
	Code, Name, Aggregation, ValueProperty, EventType string
	Dimensions                                        []string
}

// ParseMeter checks a definition as sent: code, name and aggregation are
// required (missing_field), the name holds no control character, and the
// rest are catalog.Meter.Validate's rules (invalid_meter). The result is
// Normalized: eventType defaults to the code.
func ParseMeter(r MeterRequest) (catalog.Meter, error) {
	for _, f := range []struct{ name, value string }{{"code", r.Code}, {"name", r.Name}, {"aggregation", r.Aggregation}} {
		if f.value == "" {
			return catalog.Meter{}, invalid(CodeMissingField, "field %q is required", f.name)
		}
	}
	if err := rule.FreeText("name", r.Name); err != nil {
		return catalog.Meter{}, err
	}
	m := catalog.Meter{Code: r.Code, Name: r.Name, Aggregation: r.Aggregation, ValueProperty: r.ValueProperty,
		Dimensions: slices.Clone(r.Dimensions), EventType: r.EventType}
	if err := m.Validate(); err != nil {
		return catalog.Meter{}, err
	}
	return m.Normalized(), nil
}

// CheckCode checks a meter code as a path or query names it.
func CheckCode(code string) error {
	if !catalog.ValidKey(code) {
		return invalid(catalog.CodeInvalidMeter, "a meter code is 1 to %d of A-Z a-z 0-9 _ . -, got %q", catalog.MaxMeterCode, code)
	}
	return nil
}

// SameDefinition reports whether two definitions count, aggregate, group
// and are fed the same: a definition sent again is a replay, whatever the
// order of its dimensions.
func SameDefinition(a, b catalog.Meter) bool {
	if a.Code != b.Code || a.Name != b.Name || a.Aggregation != b.Aggregation || a.ValueProperty != b.ValueProperty ||
		a.EventType != b.EventType || len(a.Dimensions) != len(b.Dimensions) {
		return false
	}
	x, y := slices.Sorted(slices.Values(a.Dimensions)), slices.Sorted(slices.Values(b.Dimensions))
	return slices.Equal(x, y)
}

// MeterExists is the refusal of a definition of a code defined otherwise.
func MeterExists(code string) error {
	return rule.Errorf(rule.Conflict, CodeMeterExists,
		"meter %q is already defined with other content: a meter never changes once defined (define one of another code)", code)
}

// EventTypeTaken is the refusal of a definition whose eventType feeds
// another meter.
func EventTypeTaken(eventType, by string) error {
	return rule.Errorf(rule.Conflict, CodeEventTypeTaken, "eventType %q already feeds meter %q", eventType, by)
}

// MeterNotFound is the answer for a code not in the catalog.
func MeterNotFound(code string) error {
	return rule.Errorf(rule.NotFound, CodeMeterNotFound, "no meter %q in the catalog", code)
}

// ImpliedMeter is the meter a price for a code not in the catalog defines
// (section 3a): sum, no dimensions, named and fed by its code — unless
// attempt > 0, when the code's eventType feeds another meter:
// ImpliedEventType(code, attempt).
func ImpliedMeter(code string, attempt int) catalog.Meter {
	return catalog.Meter{Code: code, Name: code, Aggregation: catalog.Sum, EventType: ImpliedEventType(code, attempt)}
}

// ImpliedEventType is the eventType an implied meter tries at its attempt:
// its code first, then "implied.<code>", then "implied.<code>.<n>" for n =
// 2, 3, ...: the first free one, so the choice is deterministic given the
// catalog, and never longer than catalog.MaxEventType (a code is at most
// 64 characters).
func ImpliedEventType(code string, attempt int) string {
	switch attempt {
	case 0:
		return code
	case 1:
		return "implied." + code
	default:
		return fmt.Sprintf("implied.%s.%d", code, attempt)
	}
}

// CheckDimensionPrice checks a price's dimensions against its meter
// (catalog.ValidateDimensions: invalid_dimensions, also for any dimension
// of a meter that has none) and against the dimension sets its series
// already names: one that could match the same fact as another of as many
// dimensions is refused (catalog.Overlap: 409 ambiguous_price). The same
// set again is a new version of that entry of the series.
func CheckDimensionPrice(m catalog.Meter, dims map[string]string, series []map[string]string) error {
	if err := catalog.ValidateDimensions(m, dims); err != nil {
		return err
	}
	for _, other := range series {
		if catalog.Overlap(dims, other) {
			return rule.Errorf(rule.Conflict, CodeAmbiguousPrice,
				"a price for %s and one for %s could both match a fact with as many dimensions: make one more specific",
				catalog.String(dims), catalog.String(other))
		}
	}
	return nil
}
