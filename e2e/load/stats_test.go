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
	got, _ = Percentiles([]Sample{{2, 10}, {0.1, 90}}, 50, 90, 91, 99)
	if want := []float64{0.1, 0.1, 2, 2}; !equal(got, want) {
		t.Fatalf("weighted: got %v, want %v", got, want)
	}
	if _, ok := Percentiles(nil, 50); ok {
		t.Fatal("no samples: want ok false")
	}
	if _, ok := Percentiles([]Sample{{1, 0}}, 50); ok {
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
	// batch ->4 (2.0).
	want := []Sample{{0.2, 5}, {1.5, 5}, {1.0, 10}, {2.0, 10}}
	if len(got) != len(want) || unreached != 0 || extra != 0 {
		t.Fatalf("got %v unreached %d extra %d, want %v", got, unreached, extra, want)
	}
	for i := range want {
		if diff := got[i].Value - want[i].Value; diff > 1e-9 || diff < -1e-9 || got[i].Weight != want[i].Weight {
			t.Fatalf("pair %d: got %v, want %v (all %v)", i, got[i], want[i], got)
		}
	}

	// Fewer reached than accepted; a reach before the accept clamps to 0.
	got, unreached, extra = MatchFIFO([]Step{{sec(3), 4}, {sec(5), 4}}, []Step{{sec(2), 3}}, 0)
	if len(got) != 1 || got[0] != (Sample{0, 3}) || unreached != 5 || extra != 0 {
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
