package load

import (
	"math"
	"strings"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestCPUFigures(t *testing.T) {
	// Samples every second; the machine busy 150 ticks a second of 200
	// (2 cores), usage 40, postgres 60, the load tool 20.
	var samples []cpuSample
	for i := range 11 {
		f := float64(i)
		samples = append(samples, cpuSample{at: time.Duration(i) * time.Second, busy: 1000 + 150*f, idle: 500 + 50*f,
			ticks: map[string]float64{"usage": 40 * f, "postgres": 100 + 60*f, "load tool": 20 * f}})
	}
	// The window 2.5s -> 8.5s (interpolated at both ends): 6 s, 900 busy
	// ticks = 9,000 CPU-ms; 3,000 facts.
	c := cpuFigures(samples, []string{"usage", "postgres", "load tool"}, 2500*time.Millisecond, 8500*time.Millisecond, 3000, 2, 0.5, "test")
	if !near(c.WindowSeconds, 6) || !near(c.AllIn, 3) || !near(c.MachineBusy, 0.75) || !near(c.Ratio, 6) {
		t.Fatalf("window %v, all-in %v, busy %v, ratio %v; want 6s, 3 ms/fact, 0.75, 6x", c.WindowSeconds, c.AllIn, c.MachineBusy, c.Ratio)
	}
	want := []CPUGroup{
		{Name: "usage", PerFact: 0.8, Share: 0.8 / 3, Floor: 1.6},
		{Name: "postgres", PerFact: 1.2, Share: 0.4, Floor: 2.4},
		{Name: "load tool", PerFact: 0.4, Share: 0.4 / 3, Floor: 0.8},
	}
	if len(c.Groups) != len(want) {
		t.Fatalf("groups %+v, want %+v", c.Groups, want)
	}
	for i, g := range c.Groups {
		w := want[i]
		if g.Name != w.Name || !near(g.PerFact, w.PerFact) || !near(g.Share, w.Share) || !near(g.Floor, w.Floor) {
			t.Errorf("group %d = %+v, want %+v", i, g, w)
		}
	}
	if !near(c.System, 2.4) {
		t.Errorf("system %v, want 2.4", c.System)
	}
	if !near(c.Rest, 3-0.8-1.2-0.4) {
		t.Errorf("rest %v, want %v", c.Rest, 3-0.8-1.2-0.4)
	}
}

func TestCPUFiguresWithoutGroupsOrFacts(t *testing.T) {
	samples := []cpuSample{{at: 0, busy: 0, idle: 0, ticks: map[string]float64{}},
		{at: time.Second, busy: 100, idle: 100, ticks: map[string]float64{}}}
	c := cpuFigures(samples, nil, 0, time.Second, 1000, 2, 0, "")
	if !near(c.AllIn, 1) || len(c.Groups) != 0 || c.Rest != 0 || c.Ratio != 0 {
		t.Errorf("no groups, no floor: %+v; want all-in 1 ms/fact only", c)
	}
	if c := cpuFigures(samples, nil, 0, time.Second, 0, 2, 0, ""); c.AllIn != 0 || c.Note == "" {
		t.Errorf("no facts: %+v; want no figure and a note", c)
	}
}

func TestCPUAtClampsOutsideTheSamples(t *testing.T) {
	samples := []cpuSample{{at: time.Second, busy: 10}, {at: 2 * time.Second, busy: 20}}
	if got := at(samples, 0).busy; got != 10 {
		t.Errorf("before the first sample: %v, want 10", got)
	}
	if got := at(samples, 5*time.Second).busy; got != 20 {
		t.Errorf("after the last sample: %v, want 20", got)
	}
	if got := at(samples, 1250*time.Millisecond).busy; !near(got, 12.5) {
		t.Errorf("between: %v, want 12.5", got)
	}
}

func TestCPUFiguresOfAStackNotStartedHere(t *testing.T) {
	m := startCPUMeter(nil, time.Now())
	time.Sleep(10 * time.Millisecond) // deliberate: some time for the meter to measure
	m.finish()
	cfg := &Config{NoProcesses: "not started here", Floor: 0.2, FloorSource: "test"}
	c := m.figures(cfg, 0, time.Hour, 100, nil)
	if len(c.Groups) != 0 || c.System != 0 {
		t.Errorf("groups %+v, system %v: want none without processes", c.Groups, c.System)
	}
	if !strings.Contains(c.Note, "not started here") {
		t.Errorf("note %q: want the reason there are no groups", c.Note)
	}
	if c.Floor != 0.2 || c.FloorSource != "test" {
		t.Errorf("floor %v from %q, want 0.2 from test", c.Floor, c.FloorSource)
	}
}

func TestCPUWindows(t *testing.T) {
	// Samples every second over 10 s; postgres busy 60 ticks a second for
	// the first 5 s and 120 after, the machine 150 then 180.
	var samples []cpuSample
	var busy, pg float64
	for i := range 11 {
		samples = append(samples, cpuSample{at: time.Duration(i) * time.Second, busy: busy, ticks: map[string]float64{"postgres": pg}})
		if i < 5 {
			busy, pg = busy+150, pg+60
		} else {
			busy, pg = busy+180, pg+120
		}
	}
	// Charges before the window are left out; one at its very end counts.
	charges := []Step{{At: 500 * time.Millisecond, N: 7}, {At: 2 * time.Second, N: 100}, {At: 6 * time.Second, N: 50}, {At: 9 * time.Second, N: 3}}
	ws := cpuWindows(samples, []string{"postgres"}, time.Second, 9*time.Second, 4*time.Second, charges)
	want := []CPUWindow{
		{From: 0, To: 4, Charged: 100, AllIn: 1.5, Groups: map[string]float64{"postgres": 0.6}},
		{From: 4, To: 8, Charged: 53, AllIn: 1.8, Groups: map[string]float64{"postgres": 1.2}},
	}
	if len(ws) != len(want) {
		t.Fatalf("windows %+v, want %+v", ws, want)
	}
	for i, w := range ws {
		x := want[i]
		if !near(w.From, x.From) || !near(w.To, x.To) || w.Charged != x.Charged || !near(w.AllIn, x.AllIn) || !near(w.Groups["postgres"], x.Groups["postgres"]) {
			t.Errorf("window %d = %+v, want %+v", i, w, x)
		}
	}
}
