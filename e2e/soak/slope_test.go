package soak

import "testing"

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
