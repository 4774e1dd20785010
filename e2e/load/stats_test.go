package load

import (
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	var s []Sample
	for v := 1; v <= 100; v++ {
		s = append(s, Sample{Value: float64(101 - v), Weight: 1}) // unsorted
	}
	got, ok := Percentiles(s, 50, 95, 99, 100)
	if !ok || got[0] != 50 || got[1] != 95 || got[2] != 99 || got[3] != 100 {
		t.Fatalf("1..100: got %v %v, want [50 95 99 100]", got, ok)
	}

	// Weights: 90 facts at 0.1s, 10 at 2s.
	got, _ = Percentiles([]Sample{{Value: 2, Weight: 10}, {Value: 0.1, Weight: 90}}, 50, 90, 91, 99)
	if want := []float64{0.1, 0.1, 2, 2}; !equal(got, want) {
		t.Fatalf("weighted: got %v, want %v", got, want)
	}
	if _, ok := Percentiles(nil, 50); ok {
		t.Fatal("no samples: want ok false")
	}
	if _, ok := Percentiles([]Sample{{Value: 1, Weight: 0}}, 50); ok {
		t.Fatal("zero weight: want ok false")
	}
}

func TestMatchFIFO(t *testing.T) {
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	// A probe at 0, batches of 10 at 1s and (answered out of order) 2s and 1.5s.
	accepts := []Step{{sec(0), 1}, {sec(1), 10}, {sec(2), 10}, {sec(1.5), 10}}
	// Query saw 6 at 1.2s, 15 more at 2.5s, 10 more at 4s.
	reaches := []Step{{sec(1.2), 6}, {sec(2.5), 15}, {sec(4), 10}}
	got, unreached, extra := MatchFIFO(accepts, reaches, 1)
	// Pairs: probe 0->1.2 (skipped); 5 of the 1s batch ->1.2 (0.2);
	// 5 more of it ->2.5 (1.5); the 1.5s batch ->2.5 (1.0); the 2s
	// batch ->4 (2.0); each at its batch's accept time.
	want := []Sample{{0.2, 5, sec(1)}, {1.5, 5, sec(1)}, {1.0, 10, sec(1.5)}, {2.0, 10, sec(2)}}
	if len(got) != len(want) || unreached != 0 || extra != 0 {
		t.Fatalf("got %v unreached %d extra %d, want %v", got, unreached, extra, want)
	}
	for i := range want {
		if diff := got[i].Value - want[i].Value; diff > 1e-9 || diff < -1e-9 || got[i].Weight != want[i].Weight || got[i].At != want[i].At {
			t.Fatalf("pair %d: got %v, want %v (all %v)", i, got[i], want[i], got)
		}
	}

	// Fewer reached than accepted; a reach before the accept clamps to 0.
	got, unreached, extra = MatchFIFO([]Step{{sec(3), 4}, {sec(5), 4}}, []Step{{sec(2), 3}}, 0)
	if len(got) != 1 || got[0] != (Sample{0, 3, sec(3)}) || unreached != 5 || extra != 0 {
		t.Fatalf("short: got %v unreached %d extra %d", got, unreached, extra)
	}
	// More reached than accepted (a fact counted twice).
	_, unreached, extra = MatchFIFO([]Step{{sec(1), 2}}, []Step{{sec(2), 1}, {sec(3), 3}}, 0)
	if unreached != 0 || extra != 2 {
		t.Fatalf("long: unreached %d extra %d, want 0 and 2", unreached, extra)
	}
}

func TestPickerShares(t *testing.T) {
	cfg := Config{Tenants: 4, Dominant: 0.5}
	p := newPicker(cfg.Weights())
	n := make([]int, 4)
	for range 600 {
		n[p.next()]++
	}
	if n[0] != 300 || n[1] != 100 || n[2] != 100 || n[3] != 100 {
		t.Fatalf("shares of 600 batches: %v, want [300 100 100 100]", n)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLatencyWindows(t *testing.T) {
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	// A 25 s run from 5 s: windows 0-10, 10-25 (the last takes the
	// remainder). A slow start (1 s for the 10 facts at 6 s), fast after;
	// one sample before the start (clamped into the first window) and one
	// after the end (the last).
	samples := []Sample{
		{Value: 1, Weight: 10, At: sec(6)}, {Value: 0.1, Weight: 90, At: sec(7)}, {Value: 0.3, Weight: 1, At: sec(4)},
		{Value: 0.2, Weight: 50, At: sec(16)}, {Value: 0.2, Weight: 50, At: sec(25.9)},
		{Value: 0.05, Weight: 20, At: sec(26)}, {Value: 0.4, Weight: 1, At: sec(31)},
	}
	got := LatencyWindows(samples, sec(5), sec(30))
	want := []LatencyWindow{
		{From: 0, To: 10, Facts: 101, P50: 0.1, P95: 1, P99: 1, Max: 1},
		{From: 10, To: 25, Facts: 121, P50: 0.2, P95: 0.2, P99: 0.2, Max: 0.4},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d windows %v, want %v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("window %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// A run of 5 minutes: windows of 30 s, 10 of them.
	if got := LatencyWindows(nil, 0, 5*time.Minute); len(got) != 10 || got[0].To != 30 {
		t.Errorf("5 minutes: %d windows, the first to %vs; want 10 of 30 s", len(got), got[0].To)
	}
	// 60.002 s: six windows, the last to 60.002.
	if got := LatencyWindows(nil, 0, sec(60.002)); len(got) != 6 || got[5].To != 60.002 {
		t.Errorf("60.002 s: %d windows %v; want 6, the last to 60.002", len(got), got)
	}
	if got := LatencyWindows(samples, sec(5), sec(5)); got != nil {
		t.Errorf("empty run: got %v, want none", got)
	}
}
