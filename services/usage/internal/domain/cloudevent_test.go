package domain

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/catalog"
)

// A CloudEvent maps onto its fact by the catalog meter its type feeds:
// the quantity from data[valueProperty] for sum, max and latest (numbers
// and numeric strings, exactly), 1 for count and unique_count, the other
// string and number members as properties.
func TestFromCloudEvent(t *testing.T) {
	cat := NewCatalog([]catalog.Meter{
		{Code: "tokens", Name: "Tokens", Aggregation: catalog.Sum, ValueProperty: "tokens", Dimensions: []string{"model"}, EventType: "prompt"},
		{Code: "calls", Name: "Calls", Aggregation: catalog.Count},
		{Code: "users", Name: "Users", Aggregation: catalog.UniqueCount, ValueProperty: "user_id", EventType: "active"},
		{Code: "seats", Name: "Seats", Aggregation: catalog.Max, ValueProperty: "seats"},
		{Code: "implied", Name: "Implied", Aggregation: catalog.Sum},
	})
	at := now.Add(-time.Hour)
	base := CloudEvent{ID: "e1", Source: "gw", Subject: "acme", Time: at.Format("2006-01-02T15:04:05Z07:00")}
	str := func(s string) DataValue { return DataValue{Text: s, Kind: DataString} }
	num := func(s string) DataValue { return DataValue{Text: s, Kind: DataNumber} }
	other := DataValue{Kind: DataOther}
	tests := []struct {
		name     string
		typ      string
		data     map[string]DataValue
		meter    string
		quantity string
		props    map[string]string
		code     string
	}{
		{"sum from a number", "prompt", map[string]DataValue{"tokens": num("0.000000000001"), "model": str("gpt-4")}, "tokens", "0.000000000001", map[string]string{"model": "gpt-4"}, ""},
		{"sum from a numeric string", "prompt", map[string]DataValue{"tokens": str("1234567890123.5"), "model": str("gpt-4")}, "tokens", "1234567890123.5", map[string]string{"model": "gpt-4"}, ""},
		{"numbers become properties by their text", "prompt", map[string]DataValue{"tokens": num("3"), "region": num("1.50"), "flag": other}, "tokens", "3", map[string]string{"region": "1.50"}, ""},
		{"count takes 1", "calls", map[string]DataValue{"path": str("/v1")}, "calls", "1", map[string]string{"path": "/v1"}, ""},
		{"count without data", "calls", nil, "calls", "1", nil, ""},
		{"unique_count keeps its value", "active", map[string]DataValue{"user_id": num("42")}, "users", "1", map[string]string{"user_id": "42"}, ""},
		{"max", "seats", map[string]DataValue{"seats": num("7")}, "seats", "7", nil, ""},
		{"unknown type", "nope", nil, "", "", nil, CodeUnknownEventType},
		{"type is the eventType, not the code", "tokens", nil, "", "", nil, CodeUnknownEventType},
		{"sum without its value", "prompt", map[string]DataValue{"model": str("gpt-4")}, "", "", nil, CodeMissingValue},
		{"sum value not a number", "prompt", map[string]DataValue{"tokens": other}, "", "", nil, CodeInvalidQuantity},
		{"sum value not numeric", "prompt", map[string]DataValue{"tokens": str("many")}, "", "", nil, CodeInvalidQuantity},
		{"negative", "seats", map[string]DataValue{"seats": num("-1")}, "", "", nil, CodeInvalidQuantity},
		{"a meter without valueProperty", "implied", map[string]DataValue{"value": num("1")}, "", "", nil, CodeMissingValue},
		{"unique_count without its value", "active", map[string]DataValue{"other": str("x")}, "", "", nil, CodeMissingValue},
		{"a property name outside the rule", "calls", map[string]DataValue{"user id": str("x")}, "", "", nil, CodeInvalidProperties},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := base
			ev.Type, ev.Data = tt.typ, tt.data
			u, err := FromCloudEvent(ev, cat, now)
			if tt.code != "" {
				if err == nil || err.Code != tt.code {
					t.Fatalf("got %+v %v, want %s", u, err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.MeterCode != tt.meter || u.Quantity.String() != tt.quantity || !maps.Equal(u.Properties, tt.props) ||
				u.SourceSystem != "gw" || u.SourceEventID != "e1" || !u.OccurredAt.Equal(at) {
				t.Fatalf("usage %+v, want meter %s quantity %s properties %v", u, tt.meter, tt.quantity, tt.props)
			}
		})
	}
	many := map[string]DataValue{}
	for i := range catalog.MaxProperties + 1 {
		many["p"+strings.Repeat("x", i)] = str("v")
	}
	ev := base
	ev.Type, ev.Data = "calls", many
	if _, err := FromCloudEvent(ev, cat, now); err == nil || err.Code != CodeTooManyProperties {
		t.Fatalf("17 properties: %v, want %s", err, CodeTooManyProperties)
	}
}
