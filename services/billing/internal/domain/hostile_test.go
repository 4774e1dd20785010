package domain

import (
	"errors"
	"strings"
	"testing"
	"time"
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

// A duration too long for time.Duration is refused, not wrapped around
// into a short one.
func TestParseDurationRefusesOverflow(t *testing.T) {
	for _, s := range []string{"PT9999999999S", "PT9223372037S", "P9999W9999DT999999H99999999M9999999999S"} {
		if d, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v", s, d)
		}
	}
	if d, err := ParseDuration("PT9223372035S"); err != nil || d != 9223372035*time.Second {
		t.Fatalf("the longest whole seconds: %v %v", d, err)
	}
}

// FuzzParseDuration: an accepted ISO 8601 duration is exactly the sum of
// its parts (no wrap-around); one a grace period may be formats back to
// the same length.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"PT1H", "P1DT12H", "PT90M", "PT0S", "P2W", "PT1.5S", "PT9999999999S", "P", "PT", "P1Y", "-PT1H", "PT1H\x00", "P9999W"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("%q -> %v", s, d)
		}
		if d > MaxGrace {
			return // refused by ParseSettings; only what is stored is formatted
		}
		if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
			t.Fatalf("%q -> %v -> %s -> %v %v", s, d, FormatDuration(d), back, err)
		}
	})
}

// FuzzTimeZone: an accepted time zone is an IANA name time.LoadLocation
// knows, never "", "Local", a path or a name with NUL.
func FuzzTimeZone(f *testing.F) {
	for _, s := range []string{"Asia/Seoul", "UTC", "Local", "", "/etc/passwd", "../../etc/passwd", "Europe/Berlin\x00", "America/Argentina/Buenos_Aires", "EST5EDT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s, err := ParseSettings(SettingsRequest{TimeZone: &name})
		if err != nil {
			return
		}
		if name == "" || name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") || strings.ContainsRune(name, 0) || s.TimeZone != name {
			t.Fatalf("accepted %q", name)
		}
	})
}
