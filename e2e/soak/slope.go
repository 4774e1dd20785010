package soak

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Flat is the slope test of one resource series: its level after warm-up
// against the value a least-squares line through the last half of the run
// ([Half, End]) reaches at End. The level is the median of the readings
// taken from the first settled reading at or after Warm (Settled: every
// consumer group of every service held its partitions, and the series'
// service was not down or restarting after a kill) for as long as the
// warm-up's window lasts (Baseline-Warm), settled readings only, and
// before Half. A level read before the consumers held their partitions is
// below the working level (their fetchers' goroutines, buffers and
// connections come with the assignment) and would call that level growth.
// Both read the series' floor: its least reading in each stretch of Floor
// seconds (every reading when Floor is 0). A leak raises what a service
// holds at its quietest; the catch-up after a fault raises what it holds
// for minutes (consumers fetching a backlog, pages the Go runtime returns
// slowly after a peak) and falls back, and a line fitted through every
// reading of a half that happened to hold several catch-ups ends above a
// level its series came back to (the third hour's rss/query: 46-124 MiB,
// back at 51 at its end, judged +16.6% by the line). The series grew when
// that value exceeds the level by more than 10% and by more than Slack
// (the noise of small counts: a few goroutines, files or connections).
type Flat struct {
	Name            string
	Level, EndFit   float64
	From            float64 // when the level's first reading was taken
	PerMinute       float64 // the fitted line's slope
	Readings        int
	Grew, NotEnough bool
}

// Window is the stretch of the run the test reads.
type Window struct {
	Warm, Baseline, Half, End float64 // seconds after the load began
	// Floor is the stretch whose least reading stands for it (seconds;
	// 0: every reading stands for itself).
	Floor float64
	// Settled reports whether a reading of the named series taken at t
	// may be part of the level; nil: every reading may.
	Settled func(name string, t float64) bool
}

// Slack is the absolute growth tolerated beyond 10%, by series kind.
var Slack = map[string]float64{
	"rss":        4 << 20, // 4 MiB
	"heap":       4 << 20, // shown beside rss, not judged (Judged)
	"goroutines": 5,
	"fds":        5,
	"conns":      2,
}

// Judged reports whether a series of kind fails the run when it grew: a
// service's Go heap in use is tested and shown to tell what its resident
// memory holds (live objects, or pages the runtime keeps after a peak),
// the resident memory is what is judged.
func Judged(kind string) bool { return kind != "heap" }

// FlatTest runs the slope test on a series named kind/what.
func FlatTest(name string, pts []Point, w Window) Flat {
	kind, _, _ := strings.Cut(name, "/")
	f := Flat{Name: name}
	var baseT, base []float64
	var xs, ys []float64
	from := -1.0
	for _, p := range pts {
		settled := w.Settled == nil || w.Settled(name, p.T)
		if from < 0 && settled && p.T >= w.Warm && p.T < w.Half {
			from = p.T
			f.From = p.T
		}
		if from >= 0 && settled && p.T <= from+(w.Baseline-w.Warm) && p.T < w.Half {
			baseT, base = append(baseT, p.T), append(base, p.V)
		}
		if p.T >= w.Half && p.T <= w.End {
			xs, ys = append(xs, p.T), append(ys, p.V)
		}
	}
	f.Readings = len(xs)
	_, base = floorPoints(baseT, base, w.Floor, w.End)
	xs, ys = floorPoints(xs, ys, w.Floor, w.End)
	if len(base) == 0 || len(xs) < 3 {
		f.NotEnough = true
		return f
	}
	f.Level = median(base)
	slope, icept := fit(xs, ys)
	f.PerMinute = slope * 60
	f.EndFit = icept + slope*w.End
	f.Grew = f.EndFit > f.Level*1.10 && f.EndFit-f.Level > Slack[kind]
	return f
}

// floorPoints is the least reading of each stretch of floor seconds, at
// its time, stretches counted back from end; a stretch whose readings
// span less than a third of it (cut by the window's edge) stands for nothing:
// one reading would stand for whatever burst it caught. The readings as
// they are when floor is 0. ts are in order.
func floorPoints(ts, vs []float64, floor, end float64) ([]float64, []float64) {
	if floor <= 0 {
		return ts, vs
	}
	stretch := func(t float64) float64 { return math.Floor((end - t) / floor) }
	var outT, outV []float64
	for i := 0; i < len(ts); {
		j, low := i, i
		for ; j < len(ts) && stretch(ts[j]) == stretch(ts[i]); j++ {
			if vs[j] < vs[low] {
				low = j
			}
		}
		if ts[j-1]-ts[i] >= floor/3 {
			outT, outV = append(outT, ts[low]), append(outV, vs[low])
		}
		i = j
	}
	return outT, outV
}

func (f Flat) String() string {
	verdict := "flat"
	switch {
	case f.NotEnough:
		verdict = "not enough readings"
	case f.Grew && !Judged(strings.SplitN(f.Name, "/", 2)[0]):
		verdict = "grew (not judged)"
	case f.Grew:
		verdict = "GREW"
	}
	return fmt.Sprintf("%s: level %s from %.0fs, %s at the end of the fit (%+.1f%%), %s/min: %s",
		f.Name, f.fmt(f.Level), f.From, f.fmt(f.EndFit), pct(f.EndFit, f.Level), f.fmt(f.PerMinute), verdict)
}

func (f Flat) fmt(v float64) string {
	if strings.HasPrefix(f.Name, "rss/") || strings.HasPrefix(f.Name, "heap/") {
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%.1f", v)
}

func pct(v, of float64) float64 {
	if of == 0 {
		return 0
	}
	return (v/of - 1) * 100
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fit returns the least-squares line through (xs, ys).
func fit(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, sy / n
	}
	slope = (n*sxy - sx*sy) / d
	return slope, (sy - slope*sx) / n
}
