package events

import "testing"

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
