package domain

import (
	"testing"

	"github.com/usagebilling/billing/pkg/catalog"
)

func TestParseMeter(t *testing.T) {
	m, err := ParseMeter(MeterRequest{Code: "tokens", Name: "Tokens", Aggregation: "sum", Dimensions: []string{"model"}})
	if err != nil || m.EventType != "tokens" || len(m.Dimensions) != 1 {
		t.Fatalf("ParseMeter = %+v, %v; want eventType defaulted to the code", m, err)
	}
	for _, tt := range []struct {
		name string
		r    MeterRequest
		want string
	}{
		{"no code", MeterRequest{Name: "N", Aggregation: "sum"}, CodeMissingField},
		{"no name", MeterRequest{Code: "m", Aggregation: "sum"}, CodeMissingField},
		{"no aggregation", MeterRequest{Code: "m", Name: "N"}, CodeMissingField},
		{"control character in the name", MeterRequest{Code: "m", Name: "a\nb", Aggregation: "sum"}, "control_character"},
		{"unknown aggregation", MeterRequest{Code: "m", Name: "N", Aggregation: "avg"}, catalog.CodeInvalidMeter},
	} {
		if _, err := ParseMeter(tt.r); code(err) != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.want)
		}
	}
}

func TestSameDefinition(t *testing.T) {
	a := catalog.Meter{Code: "t", Name: "T", Aggregation: "sum", Dimensions: []string{"model", "region"}, EventType: "t"}
	b := a
	b.Dimensions = []string{"region", "model"}
	if !SameDefinition(a, b) {
		t.Fatal("the order of the dimensions counts")
	}
	for _, change := range []func(*catalog.Meter){
		func(m *catalog.Meter) { m.Name = "U" },
		func(m *catalog.Meter) { m.Aggregation = "max" },
		func(m *catalog.Meter) { m.ValueProperty = "v" },
		func(m *catalog.Meter) { m.EventType = "u" },
		func(m *catalog.Meter) { m.Dimensions = []string{"model"} },
		func(m *catalog.Meter) { m.Dimensions = []string{"model", "zone"} },
	} {
		c := a
		c.Dimensions = append([]string(nil), a.Dimensions...)
		change(&c)
		if SameDefinition(a, c) {
			t.Errorf("%+v counts as %+v", c, a)
		}
	}
}

func TestImpliedMeter(t *testing.T) {
	m := ImpliedMeter("api_calls", 0)
	if m.Aggregation != catalog.Sum || m.Name != "api_calls" || m.EventType != "api_calls" || len(m.Dimensions) != 0 || m.Validate() != nil {
		t.Fatalf("implied meter %+v", m)
	}
	long := string(make65()[:64])
	for attempt, want := range []string{"api_calls", "implied.api_calls", "implied.api_calls.2", "implied.api_calls.3"} {
		if got := ImpliedEventType("api_calls", attempt); got != want {
			t.Errorf("attempt %d: %s, want %s", attempt, got, want)
		}
		if m := ImpliedMeter(long, attempt); m.Validate() != nil {
			t.Errorf("implied meter of a 64-character code, attempt %d: %v", attempt, m.Validate())
		}
	}
}

func TestCheckDimensionPrice(t *testing.T) {
	m := catalog.Meter{Code: "tokens", Name: "T", Aggregation: "sum", Dimensions: []string{"model", "region"}, EventType: "tokens"}
	series := []map[string]string{nil, {"model": "gpt-4"}, {"model": "gpt-4", "region": "eu"}}
	for _, tt := range []struct {
		name string
		m    catalog.Meter
		dims map[string]string
		want string
	}{
		{"the default again", m, nil, ""},
		{"the same set again", m, map[string]string{"model": "gpt-4"}, ""},
		{"another value", m, map[string]string{"model": "gpt-3.5"}, ""},
		{"another name, as specific", m, map[string]string{"region": "eu"}, CodeAmbiguousPrice},
		{"two, disagreeing", m, map[string]string{"model": "gpt-4", "region": "us"}, ""},
		{"not a dimension", m, map[string]string{"colour": "red"}, catalog.CodeInvalidDimensions},
		{"empty value", m, map[string]string{"model": ""}, catalog.CodeInvalidDimensions},
		{"a meter without dimensions", ImpliedMeter("api_calls", 0), map[string]string{"model": "gpt-4"}, catalog.CodeInvalidDimensions},
	} {
		if err := CheckDimensionPrice(tt.m, tt.dims, series); code(err) != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
