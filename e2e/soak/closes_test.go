package soak

import (
	"slices"
	"testing"
	"time"
)

// The soak closes a period every SOAK_CLOSE_EVERY before the load's last
// half minute, once at half time in a run not longer than that, and never
// with 0.
func TestCloseTimes(t *testing.T) {
	m := time.Minute
	for _, c := range []struct {
		d, every time.Duration
		want     []time.Duration
	}{
		{5 * m, 15 * m, []time.Duration{150 * time.Second}},
		{5 * m, 5 * m, []time.Duration{150 * time.Second}},
		{60 * m, 15 * m, []time.Duration{15 * m, 30 * m, 45 * m}},
		{45*m + 20*time.Second, 15 * m, []time.Duration{15 * m, 30 * m}},
		{60 * m, 0, nil},
	} {
		if got := closeTimes(c.d, c.every); !slices.Equal(got, c.want) {
			t.Errorf("closeTimes(%s, %s) = %v, want %v", c.d, c.every, got, c.want)
		}
	}
}
