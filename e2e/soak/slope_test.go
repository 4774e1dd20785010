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
	w.Settled = Settled(assigned, nil, []*Fault{kill}, load)
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

// A service's level is read once it has published: invoice's relay first
// publishes at the first scheduled close, and its producer's goroutines
// (a topic producer, one per partition, one per broker) come then, a step
// of 19 that stays. Read from warm-up, before that step, the level is 104
// and the flat series after it "grew" 18%; read from the first
// publication it is flat. A service that never published is judged from
// warm-up, and a creep after the publication still fails.
func TestFlatTestLevelAfterFirstPublication(t *testing.T) {
	load := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	var assigned, goroutines, published, creep []Point
	for s := 0.0; s <= 3600; s += 5 {
		g, pub := 104.0, 0.0
		if s >= 960 {
			g, pub = 123, s-955
		}
		assigned = append(assigned, Point{s, 1})
		goroutines = append(goroutines, Point{s, g + float64(int(s)%2)})
		published = append(published, Point{s, pub})
		c := g
		if s >= 960 {
			c += (s - 960) / 60
		}
		creep = append(creep, Point{s, c})
	}
	w := window(3600)
	w.Settled = Settled(assigned, map[string][]Point{"invoice": published}, nil, load)
	if f := FlatTest("goroutines/invoice", goroutines, w); f.Grew || f.NotEnough || f.From != 960 {
		t.Errorf("level read before the first publication: %s", f)
	}
	if f := FlatTest("goroutines/invoice", creep, w); !f.Grew {
		t.Errorf("creep after the first publication: %s", f)
	}
	if f := FlatTest("goroutines/meter", goroutines, w); !f.Grew || f.From != w.Warm {
		t.Errorf("a service that never published, judged from warm-up: %s", f)
	}
}

// The test reads each series' floor: a service's resident memory at 48
// MiB between catch-ups that take it to 100 MiB for a minute, more often
// in the last half (as the third hour's query did), came back to its
// level and is flat; a line through every reading would end 30% above it.
// The same series with its floor creeping 20% over the hour grew.
func TestFlatTestReadsTheFloor(t *testing.T) {
	w := window(3600)
	series := func(floor func(s float64) float64) []Point {
		var pts []Point
		for s := 0.0; s <= 3600; s += 5 {
			every := 300.0
			if s >= 1800 {
				every = 150
			}
			v := floor(s)
			if mod := s - every*float64(int(s/every)); mod < 60 {
				v = 100 << 20 // a catch-up
			}
			pts = append(pts, Point{s, v})
		}
		return pts
	}
	flat := series(func(float64) float64 { return 48 << 20 })
	if f := FlatTest("rss/query", flat, w); f.Grew || f.NotEnough {
		t.Errorf("bursts over a flat floor: %s", f)
	}
	every := w
	every.Floor = 0
	if f := FlatTest("rss/query", flat, every); !f.Grew {
		t.Errorf("the line through every reading should end above the level: %s", f)
	}
	creep := series(func(s float64) float64 { return 48<<20 + 48<<20*0.2*s/3600 })
	if f := FlatTest("rss/query", creep, w); !f.Grew {
		t.Errorf("a floor creeping 20%%: %s", f)
	}
}
