package domain

import (
	"time"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/rule"
)

// CloudEvent is a structured CloudEvents 1.0 event whose envelope the HTTP
// edge has checked (specversion, required attributes as strings), with the
// top-level members of its data.
type CloudEvent struct {
	ID, Source, Subject, Type, Time string
	// Data are data's members by name; nil when the event has no data.
	Data map[string]DataValue
}

// DataValue is one member of a CloudEvent's data.
type DataValue struct {
	// Text is a string's value, or a number's exact JSON text ("0.1",
	// never a float's rounding).
	Text string
	// Kind says what the member is.
	Kind DataKind
}

// DataKind is the JSON kind of a data member.
type DataKind int

const (
	// DataString is a JSON string.
	DataString DataKind = iota + 1
	// DataNumber is a JSON number.
	DataNumber
	// DataOther is anything else (true, null, an object, an array): it
	// gives neither a quantity nor a property.
	DataOther
)

// FromCloudEvent maps a CloudEvent onto the usage fact it reports (DESIGN.md
// 3a, OpenMeter's ingest shape): id -> sourceEventId, source ->
// sourceSystem, subject -> the tenant, type -> the catalog meter with that
// eventType, time -> occurredAt; the quantity is data[valueProperty] (a
// number or a numeric string) for sum, max and latest, 1 for count and
// unique_count; every other string or number member of data is a property,
// and unique_count keeps data[valueProperty] as that property. The fact is
// then checked as one sent to the usage route is (Parse); now bounds
// occurredAt.
func FromCloudEvent(ev CloudEvent, cat Catalog, now time.Time) (Usage, *Error) {
	m, ok := cat.ForEventType(ev.Type)
	if !ok {
		return Usage{}, unknownEventType(ev.Type)
	}
	quantity := "1"
	props := map[string]string{}
	for k, v := range ev.Data {
		if v.Kind == DataString || v.Kind == DataNumber {
			props[k] = v.Text
		}
	}
	switch m.Aggregation {
	case catalog.Count, catalog.UniqueCount:
	default: // sum, max, latest
		if m.ValueProperty == "" {
			return Usage{}, newError(rule.Invalid, CodeMissingValue,
				"meter %q names no valueProperty: a CloudEvent cannot give its quantity", m.Code)
		}
		v, ok := ev.Data[m.ValueProperty]
		switch {
		case !ok:
			return Usage{}, newError(rule.Invalid, CodeMissingValue,
				"meter %q takes its quantity from data.%s: the event has none", m.Code, m.ValueProperty)
		case v.Kind == DataOther:
			return Usage{}, newError(rule.Invalid, CodeInvalidQuantity,
				"data.%s (meter %q's quantity) must be a number or a numeric string", m.ValueProperty, m.Code)
		}
		quantity = v.Text
		delete(props, m.ValueProperty)
	}
	u, err := Parse(Request{
		SourceSystem: ev.Source, SourceEventID: ev.ID, MeterCode: m.Code,
		Quantity: quantity, OccurredAt: ev.Time, Properties: props,
	}, now)
	if err != nil {
		return Usage{}, err
	}
	if _, err := catalog.ValueOf(m, u.Properties); err != nil {
		return Usage{}, err
	}
	return u, nil
}
