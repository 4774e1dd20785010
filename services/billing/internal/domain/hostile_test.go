package domain

import (
	"errors"
	"testing"
)

// Periods no billing period is: years before MinPeriodYear ("0000-01")
// and after MaxPeriodYear are refused as invalid_period.
func TestParsePeriodRefusesFarYears(t *testing.T) {
	for _, s := range []string{"0000-01", "0001-01", "1969-12", "2200-01", "9999-12"} {
		_, err := ParsePeriod(s)
		var e *Error
		if !errors.As(err, &e) || e.Code != "invalid_period" {
			t.Errorf("ParsePeriod(%q) = %v, want invalid_period", s, err)
		}
	}
	for _, s := range []string{"1970-01", "2026-11", "2199-12"} {
		if _, err := ParsePeriod(s); err != nil {
			t.Errorf("ParsePeriod(%q): %v", s, err)
		}
	}
}

// FuzzParsePeriod: an accepted period is YYYY-MM of an allowed year, and
// the calendar functions work on it.
func FuzzParsePeriod(f *testing.F) {
	for _, s := range []string{"2026-11", "0000-01", "2026-13", "2026-1", "9999-12", "2026-11\x00", "２０２６-11", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePeriod(s)
		if err != nil {
			return
		}
		if len(p) != 7 || p < "1970-01" || p > "2199-12" {
			t.Fatalf("accepted %q", s)
		}
		if PrevPeriod(NextPeriod(p)) != p {
			t.Fatalf("%s: next and previous do not round-trip", p)
		}
	})
}
