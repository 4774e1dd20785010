package rule

import (
	"fmt"
	"testing"
	"time"
)

func TestTime(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2026-11-01T00:00:00Z", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), true},
		{"2026-11-01T01:00:00+01:00", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), true},
		{"2026-11-01T00:00:00.123456789Z", time.Date(2026, 11, 1, 0, 0, 0, 123456000, time.UTC), true},
		{"1970-01-01T00:00:00Z", time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"1969-12-31T23:59:59Z", time.Time{}, false},
		{"2200-01-01T00:00:00Z", time.Time{}, false},
		{"0001-01-01T00:00:00Z", time.Time{}, false},
		{"2026-11-01", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, c := range cases {
		got, err := Time("effectiveAt", c.in)
		if c.ok {
			if err != nil || !got.Equal(c.want) || got.Location() != time.UTC {
				t.Errorf("%q: got %v, %v; want %v", c.in, got, err, c.want)
			}
			continue
		}
		if err == nil || err.Kind != Invalid || err.Code != CodeInvalidField {
			t.Errorf("%q: got %v, %v; want an invalid_field error", c.in, got, err)
		}
	}
}

func TestAs(t *testing.T) {
	t.Parallel()
	e := Errorf(Unprocessable, "unknown_meter", "no price for %q", "api")
	got, ok := As(fmt.Errorf("accept: %w", e))
	if !ok || got != e || got.Error() != `unknown_meter: no price for "api"` {
		t.Fatalf("%v %v", got, ok)
	}
	if _, ok := As(fmt.Errorf("plain")); ok {
		t.Fatal("found a rule in a plain error")
	}
}
