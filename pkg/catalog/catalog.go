// Package catalog holds the rules of the meter catalog that more than one
// service applies (DESIGN.md section 3a): a meter's aggregation, the limits
// of a fact's properties, and how a price's dimensions match a fact. It is
// pure: no database, no HTTP, no Kafka.
package catalog

import (
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/usagebilling/billing/pkg/rule"
)

// Aggregations: how a meter turns the facts of a line (or an analytics
// window) into one quantity.
const (
	// Sum of the facts' quantities. The aggregation of every meter implied
	// by a price.
	Sum = "sum"
	// Count of facts.
	Count = "count"
	// Max is the largest quantity.
	Max = "max"
	// Latest is the quantity of the fact with the latest occurredAt, ties
	// broken by the larger (sourceSystem, sourceEventId).
	Latest = "latest"
	// UniqueCount is the number of distinct values of the property named by
	// the meter's valueProperty.
	UniqueCount = "unique_count"
)

// Aggregations lists every aggregation.
var Aggregations = []string{Sum, Count, Max, Latest, UniqueCount}

// Limits of a meter and of a fact's properties.
const (
	MaxDimensions    = 5
	MaxProperties    = 16
	MaxPropertyKey   = 64
	MaxPropertyValue = 256
	MaxMeterCode     = 64
	MaxMeterName     = 200
	MaxEventType     = 200
)

// Stable codes of the catalog's refusals.
const (
	CodeInvalidMeter      = "invalid_meter"
	CodeInvalidProperties = "invalid_properties"
	CodeTooManyProperties = "too_many_properties"
	CodeInvalidDimensions = "invalid_dimensions"
	CodeMissingValue      = "missing_value_property"
)

// ValidKey reports whether s may name a property or a dimension: 1 to
// MaxPropertyKey of [A-Za-z0-9_.-].
func ValidKey(s string) bool {
	if s == "" || len(s) > MaxPropertyKey {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// PricedPerCharge reports whether a charge of a meter with aggregation agg
// has an amount of its own under unit pricing (sum and count); under the
// others the line is priced as a whole.
func PricedPerCharge(agg string) bool { return agg == "" || agg == Sum || agg == Count }

// Meter is a catalog meter's definition.
type Meter struct {
	Code        string
	Name        string
	Aggregation string
	// ValueProperty names the property a unique_count meter counts the
	// distinct values of; for sum, max and latest, the CloudEvents data
	// field that gives a fact's quantity (optional).
	ValueProperty string
	Dimensions    []string
	EventType     string
}

// Validate checks a definition's own rules. EventType defaults to Code
// (Normalized).
func (m Meter) Validate() *rule.Error {
	bad := func(format string, args ...any) *rule.Error {
		return rule.Errorf(rule.Invalid, CodeInvalidMeter, format, args...)
	}
	switch {
	case !ValidKey(m.Code):
		return bad("code %q must be 1 to %d of A-Z a-z 0-9 _ . -", m.Code, MaxMeterCode)
	case m.Name == "" || utf8.RuneCountInString(m.Name) > MaxMeterName:
		return bad("name must be 1 to %d characters", MaxMeterName)
	case !validAggregation(m.Aggregation):
		return bad("aggregation %q is none of %v", m.Aggregation, Aggregations)
	case m.Aggregation == UniqueCount && m.ValueProperty == "":
		return bad("a unique_count meter names its valueProperty")
	case m.ValueProperty != "" && !ValidKey(m.ValueProperty):
		return bad("valueProperty %q must be 1 to 64 of A-Z a-z 0-9 _ . -", m.ValueProperty)
	case m.Aggregation == Count && m.ValueProperty != "":
		return bad("a count meter counts facts: it has no valueProperty")
	case len(m.Dimensions) > MaxDimensions:
		return bad("at most %d dimensions, not %d", MaxDimensions, len(m.Dimensions))
	case m.EventType != "" && (utf8.RuneCountInString(m.EventType) > MaxEventType || !printable(m.EventType)):
		return bad("eventType must be 1 to %d printable characters", MaxEventType)
	}
	seen := make(map[string]bool, len(m.Dimensions))
	for _, d := range m.Dimensions {
		if !ValidKey(d) {
			return bad("dimension %q must be 1 to 64 of A-Z a-z 0-9 _ . -", d)
		}
		if seen[d] {
			return bad("dimension %q is listed twice", d)
		}
		if d == m.ValueProperty {
			return bad("dimension %q is the valueProperty", d)
		}
		seen[d] = true
	}
	return nil
}

// Normalized returns m with its defaults: EventType = Code when empty.
func (m Meter) Normalized() Meter {
	if m.EventType == "" {
		m.EventType = m.Code
	}
	return m
}

// HasDimension reports whether the meter can be grouped and priced by name.
func (m Meter) HasDimension(name string) bool {
	for _, d := range m.Dimensions {
		if d == name {
			return true
		}
	}
	return false
}

func validAggregation(a string) bool {
	for _, x := range Aggregations {
		if a == x {
			return true
		}
	}
	return false
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// ValidateProperties checks a fact's properties against the limits of
// section 3a: at most 16 keys of [A-Za-z0-9_.-]{1,64}, string values of at
// most 256 characters without control characters.
func ValidateProperties(props map[string]string) *rule.Error {
	if len(props) > MaxProperties {
		return rule.Errorf(rule.Invalid, CodeTooManyProperties, "at most %d properties, not %d", MaxProperties, len(props))
	}
	for k, v := range props {
		if !ValidKey(k) || !validValue(v) {
			return firstInvalidProperty(props)
		}
	}
	return nil
}

func validValue(v string) bool {
	return utf8.ValidString(v) && utf8.RuneCountInString(v) <= MaxPropertyValue && printable(v)
}

// firstInvalidProperty is the error of the first invalid property in key
// order, so the same properties always get the same message.
func firstInvalidProperty(props map[string]string) *rule.Error {
	for _, k := range SortedKeys(props) {
		v := props[k]
		if !ValidKey(k) {
			return rule.Errorf(rule.Invalid, CodeInvalidProperties, "property name %q must be 1 to %d of A-Z a-z 0-9 _ . -", k, MaxPropertyKey)
		}
		if !validValue(v) {
			return rule.Errorf(rule.Invalid, CodeInvalidProperties, "property %q: a value is at most %d printable characters", k, MaxPropertyValue)
		}
	}
	return nil
}

// ValueOf returns the value a fact contributes to a unique_count meter: its
// property valueProperty; a fact without it is refused.
func ValueOf(m Meter, props map[string]string) (string, *rule.Error) {
	if m.Aggregation != UniqueCount {
		return "", nil
	}
	v, ok := props[m.ValueProperty]
	if !ok || v == "" {
		return "", rule.Errorf(rule.Invalid, CodeMissingValue, "meter %q counts distinct values of property %q: the fact has none", m.Code, m.ValueProperty)
	}
	return v, nil
}

// ValidateDimensions checks a price's dimensions against its meter: each a
// dimension of the meter, with a value a property could have.
func ValidateDimensions(m Meter, dims map[string]string) *rule.Error {
	for _, k := range SortedKeys(dims) {
		if !m.HasDimension(k) {
			return rule.Errorf(rule.Invalid, CodeInvalidDimensions, "meter %q has no dimension %q (it has %v)", m.Code, k, m.Dimensions)
		}
		v := dims[k]
		if v == "" || utf8.RuneCountInString(v) > MaxPropertyValue || !printable(v) {
			return rule.Errorf(rule.Invalid, CodeInvalidDimensions, "dimension %q: a value is 1 to %d printable characters", k, MaxPropertyValue)
		}
	}
	return nil
}

// Matches reports whether a price naming dims applies to a fact with props:
// every named value equals the fact's property.
func Matches(dims, props map[string]string) bool {
	for k, v := range dims {
		if props[k] != v {
			return false
		}
	}
	return true
}

// Overlap reports whether two prices of equal specificity could both match
// one fact (section 3a: refused as ambiguous_price): they have as many
// dimensions, are not the same, and agree on every dimension both name.
func Overlap(a, b map[string]string) bool {
	if len(a) != len(b) || Same(a, b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; ok && w != v {
			return false
		}
	}
	return true
}

// Same reports whether two dimension sets are equal.
func Same(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// KeySeparator separates the name=value pairs of a Key.
const KeySeparator = "\x01"

// Key is a canonical string of a dimension set, for keys and sorting: the
// names in order, each name=value, separated by U+0001 (a control
// character neither may hold, and one PostgreSQL text can store, unlike
// NUL: services keep the key in a column); "" for none.
func Key(dims map[string]string) string {
	s := ""
	for i, k := range SortedKeys(dims) {
		if i > 0 {
			s += KeySeparator
		}
		s += k + "=" + dims[k]
	}
	return s
}

// SortedKeys returns m's keys in order.
func SortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Choose returns the index of the most specific of the candidate prices'
// dimension sets that matches props, -1 when none does. Activation refuses
// equally specific overlaps, so the most specific match is unique; should
// two remain (evidence from before the rule), the one with the smaller Key
// wins, so the choice never depends on order.
func Choose(candidates []map[string]string, props map[string]string) int {
	best := -1
	for i, d := range candidates {
		if !Matches(d, props) {
			continue
		}
		switch {
		case best < 0, len(d) > len(candidates[best]):
			best = i
		case len(d) == len(candidates[best]) && Key(d) < Key(candidates[best]):
			best = i
		}
	}
	return best
}

// String names a dimension set for people: {model=gpt-4, region=eu}.
func String(dims map[string]string) string {
	s := "{"
	for i, k := range SortedKeys(dims) {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s=%s", k, dims[k])
	}
	return s + "}"
}
