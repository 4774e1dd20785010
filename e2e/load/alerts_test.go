package load

import (
	"testing"
	"time"
)

// The thresholds spread over what a tenant is expected to send, the last
// crossed near the end; flat out, every 1,000 facts; -alert-step wins.
func TestAlertStep(t *testing.T) {
	for _, tc := range []struct {
		cfg    Config
		weight float64
		want   int64
	}{
		{Config{Alerts: 9, Rate: 1000, Duration: time.Minute}, 1, 6000},
		{Config{Alerts: 9, Rate: 1000, Duration: time.Minute}, 0.5, 3000},
		{Config{Alerts: 4, Facts: 100}, 1, 20},
		{Config{Alerts: 50, Facts: 10}, 1, 1},
		{Config{Alerts: 3}, 1, 1000},
		{Config{Alerts: 3, AlertStep: 7, Rate: 1000, Duration: time.Minute}, 1, 7},
	} {
		if got := alertStep(&tc.cfg, tc.weight); got != tc.want {
			t.Errorf("%+v at %g: step %d, want %d", tc.cfg, tc.weight, got, tc.want)
		}
	}
}

// A tenant reaches the thresholds its quantity passed, at most the alerts
// defined; a crossing not told, or told beyond them, is a problem.
func TestAlertCollectCounts(t *testing.T) {
	w := &alertWatch{cfg: &Config{Alerts: 3}, step: 10, first: map[string]time.Duration{}, copies: map[string]int{}}
	for i, d := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond} {
		id := string(rune('a' + i))
		w.first[id], w.copies[id] = d, 1
	}
	w.copies["b"] = 2
	s := w.collect(t.Context(), []int64{29, 100}, 0) // 2 + 3 reached, 3 told
	if s.Expected != 5 || s.Told != 3 || s.ToldAgain != 1 || len(s.Problems) != 1 || s.Max != 0.3 {
		t.Fatalf("%+v", s)
	}
}
