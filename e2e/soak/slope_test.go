package soak

import (
	"testing"
	"time"
)

func TestFlatTest(t *testing.T) {
	w := Window{Warm: 60, Baseline: 120, Half: 150, End: 300}
	series := func(f func(t float64) float64) []Point {
		var pts []Point
		for t := 0.0; t <= 300; t += 5 {
			pts = append(pts, Point{t, f(t)})
		}
		return pts
	}
	tests := []struct {
		name string
		pts  []Point
		grew bool
	}{
		{"goroutines/usage", series(func(t float64) float64 { return 100 + float64(int(t)%3) }), false},
		{"goroutines/usage", series(func(t float64) float64 { return 100 + t/2 }), true},
		// +4 goroutines on 20 is 20%, but within the slack of small counts.
		{"goroutines/usage", series(func(t float64) float64 {
			if t > 140 {
				return 24
			}
			return 20
		}), false},
		{"rss/billing", series(func(t float64) float64 { return 50<<20 + t*100_000 }), true},
		{"rss/billing", series(func(t float64) float64 {
			if t < 60 {
				return 10 << 20 // warming up: not the level
			}
			return 50 << 20
		}), false},
	}
	for _, tt := range tests {
		f := FlatTest(tt.name, tt.pts, w)
		if f.Grew != tt.grew || f.NotEnough {
			t.Errorf("%s: grew %v, want %v (%s)", tt.name, f.Grew, tt.grew, f)
		}
	}
	if f := FlatTest("fds/query", nil, w); !f.NotEnough {
		t.Errorf("no readings: %s", f)
	}
}

// The level is read once every consumer group holds its partitions and
// not while a killed service restarts: a service whose goroutines rise
// to their working level when its consumers are assigned (47 -> 245, at
// 100 s, after the warm-up's 60 s) is flat, and so is one whose readings
// drop while it is down after a kill.
func TestFlatTestLevelAfterAssignment(t *testing.T) {
	load := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	var assigned, goroutines, restarted []Point
	for s := 0.0; s <= 300; s += 5 {
		a, g := 0.0, 47.0
		if s >= 100 {
			a, g = 1, 245+float64(int(s)%3)
		}
		assigned = append(assigned, Point{s, a})
		goroutines = append(goroutines, Point{s, g})
		r := 245.0
		if s >= 100 && s < 135 { // killed at 100 s, up again at 105 s
			r = 30
		}
		restarted = append(restarted, Point{s, r})
	}
	kill := &Fault{Kind: "service-kill", Target: "invoice", Start: load.Add(100 * time.Second), End: load.Add(105 * time.Second)}
	w := Window{Warm: 60, Baseline: 120, Half: 150, End: 300}
	w.Settled = Settled(assigned, []*Fault{kill}, load)
	if f := FlatTest("goroutines/query", goroutines, w); f.Grew || f.NotEnough || f.From != 100 {
		t.Errorf("level read before the consumers held their partitions: %s", f)
	}
	if f := FlatTest("goroutines/invoice", restarted, w); f.Grew || f.NotEnough || f.From != 140 {
		t.Errorf("level read while the service restarted: %s", f)
	}
	// A real creep after the assignment still fails.
	var creep []Point
	for _, p := range goroutines {
		v := p.V
		if p.T >= 100 {
			v += (p.T - 100) / 2
		}
		creep = append(creep, Point{p.T, v})
	}
	if f := FlatTest("goroutines/query", creep, w); !f.Grew {
		t.Errorf("creep after the assignment: %s", f)
	}
}
