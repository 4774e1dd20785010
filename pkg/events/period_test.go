package events

import (
	"fmt"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/rule"
)

// A period is a calendar month of a year from rule.MinYear to rule.MaxYear;
// every service's request parsing and the events' own check go through
// ParsePeriod.
func TestParsePeriodRange(t *testing.T) {
	t.Parallel()
	for s, ok := range map[string]bool{
		"1970-01": true, "2026-11": true, "2199-12": true,
		"0000-01": false, "0001-01": false, "1969-12": false, "2200-01": false, "9999-12": false,
		"2026-13": false, "2026-1": false, "": false,
	} {
		if _, err := ParsePeriod(s); (err == nil) != ok {
			t.Errorf("ParsePeriod(%q): %v, want ok %v", s, err, ok)
		}
	}
}

// TestParsePeriodIsTimeParse: ParsePeriod accepts exactly what the
// definition it replaced accepted (time.Parse("2006-01"), written back
// unchanged by Period, in the year range) and returns the same instant and
// message, over every year and month from 0000-00 to 9999-13 and strings
// around that shape.
func TestParsePeriodIsTimeParse(t *testing.T) {
	t.Parallel()
	byDefinition := func(s string) (time.Time, error) {
		p, err := time.Parse("2006-01", s)
		if err != nil || Period(p) != s {
			return time.Time{}, fmt.Errorf("invalid period %q: want YYYY-MM", s)
		}
		if y := p.Year(); y < rule.MinYear || y > rule.MaxYear {
			return time.Time{}, fmt.Errorf("invalid period %q: year %d is out of range (%d to %d)", s, y, rule.MinYear, rule.MaxYear)
		}
		return p, nil
	}
	inputs := []string{"", "2026", "2026-", "2026-1", "2026-011", "+026-01", "-026-01", "2026/01", "2026-0a",
		" 2026-01", "2026-01 ", "２026-01", "20260-1", "2026--1", "2026-+1", "202６-01"}
	for y := 0; y <= 9999; y++ {
		for m := 0; m <= 13; m++ {
			inputs = append(inputs, fmt.Sprintf("%04d-%02d", y, m))
		}
	}
	for _, s := range inputs {
		got, gotErr := ParsePeriod(s)
		want, wantErr := byDefinition(s)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !got.Equal(want) || got.Location() != want.Location() {
			t.Fatalf("ParsePeriod(%q) = %v, %v; the definition: %v, %v", s, got, gotErr, want, wantErr)
		}
	}
}
