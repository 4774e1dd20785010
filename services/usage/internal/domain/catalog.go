package domain

import (
	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/rule"
)

// Catalog is the part of the replicated meter catalog a command needs: the
// meters of its facts' codes, or of its CloudEvents' types. A code priced
// for a tenant but not in the catalog is a sum meter without dimensions
// (section 3a), as before the catalog.
type Catalog struct {
	byCode      map[string]catalog.Meter
	byEventType map[string]catalog.Meter
}

// NewCatalog indexes meters by code and event type.
func NewCatalog(meters []catalog.Meter) Catalog {
	c := Catalog{byCode: make(map[string]catalog.Meter, len(meters)), byEventType: make(map[string]catalog.Meter, len(meters))}
	for _, m := range meters {
		m = m.Normalized()
		c.byCode[m.Code] = m
		c.byEventType[m.EventType] = m
	}
	return c
}

// Meter returns the catalog meter of code.
func (c Catalog) Meter(code string) (catalog.Meter, bool) {
	m, ok := c.byCode[code]
	return m, ok
}

// ForEventType returns the meter a CloudEvents type feeds.
func (c Catalog) ForEventType(eventType string) (catalog.Meter, bool) {
	m, ok := c.byEventType[eventType]
	return m, ok
}

// CheckValue refuses a fact of a unique_count meter without the property
// its valueProperty names (400 missing_value_property); any other fact
// passes.
func (c Catalog) CheckValue(u Usage) *Error {
	m, ok := c.byCode[u.MeterCode]
	if !ok {
		return nil
	}
	_, err := catalog.ValueOf(m, u.Properties)
	return err
}

// SameMeter reports whether two definitions of one code say the same: a
// meter never changes once defined, so another content is a contract
// breach.
func SameMeter(a, b catalog.Meter) bool {
	a, b = a.Normalized(), b.Normalized()
	if a.Code != b.Code || a.Aggregation != b.Aggregation || a.ValueProperty != b.ValueProperty ||
		a.EventType != b.EventType || len(a.Dimensions) != len(b.Dimensions) {
		return false
	}
	for i := range a.Dimensions {
		if a.Dimensions[i] != b.Dimensions[i] {
			return false
		}
	}
	return true
}

// unknownEventType is the refusal of a CloudEvent whose type feeds no
// meter.
func unknownEventType(eventType string) *Error {
	return newError(rule.Invalid, CodeUnknownEventType, "type %q feeds no meter of the catalog (a meter's eventType, by default its code)", eventType)
}
