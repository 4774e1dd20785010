package load

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/usagebilling/billing/e2e/procstat"
)

// ProcessGroup is a set of processes whose CPU the report shows together:
// a service's instances, PostgreSQL (its postmaster, whose children are
// counted with it), the load tool itself.
type ProcessGroup struct {
	Name string
	PIDs []int
	// OwnOnly counts the processes' own time but not their children's:
	// the load tool's children are the services, counted in their groups.
	OwnOnly bool
}

// CPU is the run's CPU per fact over the window from the first send to
// the moment the last fact was charged, divided by the facts charged.
type CPU struct {
	WindowSeconds float64 `json:"windowSeconds"`
	Facts         int64   `json:"factsCharged"`
	// AllIn is the whole machine's busy CPU (/proc/stat: all but idle and
	// iowait), per fact: everything that ran on the machine in the window.
	AllIn       float64 `json:"allInCpuMsPerFact"`
	MachineBusy float64 `json:"machineBusyShare"`
	Cores       int     `json:"cores"`
	// Groups are the processes the stack started, and the load tool, per
	// fact (/proc/<pid>/stat); empty when the load tool did not start the
	// stack (Note says why).
	Groups []CPUGroup `json:"groups,omitempty"`
	// System is the groups' sum: the system under test and the load tool,
	// whatever else runs on the machine. Rest is AllIn less System: the
	// kernel's own work and every other process on the machine.
	System float64 `json:"systemCpuMsPerFact,omitempty"`
	Rest   float64 `json:"restOfMachineCpuMsPerFact,omitempty"`
	// Floor is the floor's PostgreSQL CPU-ms per fact (make floor), when
	// known, and where it came from; Ratio is AllIn / Floor.
	Floor       float64 `json:"floorCpuMsPerFact,omitempty"`
	FloorSource string  `json:"floorSource,omitempty"`
	Ratio       float64 `json:"allInToFloor,omitempty"`
	// Windows are the window cut in slices of cpuWindowEvery.
	Windows []CPUWindow `json:"windows,omitempty"`
	Note    string      `json:"note,omitempty"`
}

// CPUGroup is one process group's CPU per fact.
type CPUGroup struct {
	Name    string  `json:"name"`
	PerFact float64 `json:"cpuMsPerFact"`
	Share   float64 `json:"shareOfAllIn"`
	Floor   float64 `json:"toFloor,omitempty"` // PerFact / the floor
}

// cpuSample is one reading: ticks of the machine and of every process.
type cpuSample struct {
	at    time.Duration // since the run's origin
	busy  float64
	idle  float64
	ticks map[string]float64 // group -> ticks
}

// cpuMeter samples the machine's and the groups' CPU until stopped, so
// the window can be cut afterwards at the first send and the last charge.
type cpuMeter struct {
	groups  func() []ProcessGroup
	origin  time.Time
	every   time.Duration
	mu      sync.Mutex
	samples []cpuSample
	errs    []string
	order   []string // group names, in the order groups first gave them
	stop    chan struct{}
	done    chan struct{}
}

// cpuEvery is the meter's sampling interval; the window's ends are
// interpolated between samples. A sample reads /proc for every process of
// the stack (PostgreSQL's forty-odd backends among them), and the meter's
// CPU is the load tool's: at 250ms it took 2.6% of a core, a quarter of the
// load tool's CPU at 1,500 facts/s (cpu-per-fact.md, step 24).
const cpuEvery = time.Second

func startCPUMeter(groups func() []ProcessGroup, origin time.Time) *cpuMeter {
	m := &cpuMeter{groups: groups, origin: origin, every: cpuEvery, stop: make(chan struct{}), done: make(chan struct{})}
	m.sample()
	go func() {
		defer close(m.done)
		t := time.NewTicker(m.every)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				m.sample()
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
	return m
}

func (m *cpuMeter) finish() {
	close(m.stop)
	<-m.done
}

func (m *cpuMeter) sample() {
	s := cpuSample{at: time.Since(m.origin), ticks: map[string]float64{}}
	mach, err := procstat.ReadMachine()
	if err != nil {
		m.note(err.Error())
		return
	}
	s.busy, s.idle = float64(mach.Busy), float64(mach.Idle)
	if m.groups != nil {
		for _, g := range m.groups() {
			m.mu.Lock()
			if !slices.Contains(m.order, g.Name) {
				m.order = append(m.order, g.Name)
			}
			m.mu.Unlock()
			for _, pid := range g.PIDs {
				t, err := groupTicks(pid, g.OwnOnly)
				if err != nil {
					m.note(fmt.Sprintf("%s (pid %d): %v", g.Name, pid, err))
					continue
				}
				s.ticks[g.Name] += float64(t)
			}
		}
	}
	m.mu.Lock()
	m.samples = append(m.samples, s)
	m.mu.Unlock()
}

func groupTicks(pid int, ownOnly bool) (uint64, error) {
	if !ownOnly {
		return procstat.Tree(pid)
	}
	s, err := procstat.ReadStat(pid)
	return s.Own(), err
}

// figures is cpuFigures over the meter's samples, with the errors it met
// and why it has no groups in the note, and its windows (charges are the
// steps of the facts charged).
func (m *cpuMeter) figures(cfg *Config, from, to time.Duration, facts int64, charges []Step) CPU {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := cpuFigures(m.samples, m.order, from, to, facts, runtime.NumCPU(), cfg.Floor, cfg.FloorSource)
	c.Windows = cpuWindows(m.samples, m.order, from, to, cpuWindowEvery, charges)
	var notes []string
	if c.Note != "" {
		notes = append(notes, c.Note)
	}
	if m.groups == nil && cfg.NoProcesses != "" {
		notes = append(notes, cfg.NoProcesses)
	}
	if len(m.errs) > 0 {
		notes = append(notes, "reading /proc failed: "+strings.Join(m.errs, "; "))
	}
	if cfg.Floor <= 0 {
		notes = append(notes, "no floor to compare with: run make floor (it writes bin/floor.json) or give -floor-ms")
	}
	c.Note = strings.Join(notes, "; ")
	return c
}

func (m *cpuMeter) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) < 5 {
		m.errs = append(m.errs, s)
	}
}

// at interpolates the samples at t: ticks of the machine and the groups.
func at(samples []cpuSample, t time.Duration) cpuSample {
	i := sort.Search(len(samples), func(i int) bool { return samples[i].at >= t })
	switch {
	case i == 0:
		return samples[0]
	case i == len(samples):
		return samples[len(samples)-1]
	}
	a, b := samples[i-1], samples[i]
	f := 0.0
	if b.at > a.at {
		f = float64(t-a.at) / float64(b.at-a.at)
	}
	lerp := func(x, y float64) float64 { return x + f*(y-x) }
	out := cpuSample{at: t, busy: lerp(a.busy, b.busy), idle: lerp(a.idle, b.idle), ticks: map[string]float64{}}
	for k, y := range b.ticks {
		out.ticks[k] = lerp(a.ticks[k], y)
	}
	return out
}

// cpuFigures cuts the window [from, to] out of the samples and divides by
// facts; floor (CPU-ms per fact, 0 when unknown) gives the ratios.
func cpuFigures(samples []cpuSample, order []string, from, to time.Duration, facts int64, cores int,
	floor float64, floorSource string) CPU {
	c := CPU{WindowSeconds: (to - from).Seconds(), Facts: facts, Cores: cores, Floor: floor, FloorSource: floorSource}
	if len(samples) < 2 || facts <= 0 || to <= from {
		c.Note = "no CPU figure: no fact was charged, or the meter took too few samples"
		return c
	}
	a, b := at(samples, from), at(samples, to)
	tick := float64(procstat.Tick) / float64(time.Millisecond)
	perFact := func(ticks float64) float64 { return ticks * tick / float64(facts) }
	busy := b.busy - a.busy
	c.AllIn = perFact(busy)
	if all := busy + b.idle - a.idle; all > 0 {
		c.MachineBusy = busy / all
	}
	if floor > 0 {
		c.Ratio = c.AllIn / floor
	}
	var groups float64
	for _, name := range order {
		d := b.ticks[name] - a.ticks[name]
		if _, ok := b.ticks[name]; !ok {
			continue
		}
		g := CPUGroup{Name: name, PerFact: perFact(d)}
		if c.AllIn > 0 {
			g.Share = g.PerFact / c.AllIn
		}
		if floor > 0 {
			g.Floor = g.PerFact / floor
		}
		c.Groups = append(c.Groups, g)
		groups += g.PerFact
	}
	if len(c.Groups) > 0 {
		c.System, c.Rest = groups, c.AllIn-groups
	}
	return c
}

// CPUWindow is one slice of the run: the cores each group kept busy (CPU
// seconds per second) and the facts charged in it. A cost that grows with
// the run's volume shows as a group's cores rising while charged/s holds.
type CPUWindow struct {
	From    float64            `json:"fromSeconds"` // since the first send
	To      float64            `json:"toSeconds"`
	Charged int64              `json:"charged"`
	AllIn   float64            `json:"allInCores"`
	Groups  map[string]float64 `json:"groupCores,omitempty"`
}

// cpuWindowEvery is the length of the report's windows.
const cpuWindowEvery = 30 * time.Second

// cpuWindows cuts [from, to] into windows of every (the last one shorter),
// with the facts of charges reached in each.
func cpuWindows(samples []cpuSample, order []string, from, to, every time.Duration, charges []Step) []CPUWindow {
	if len(samples) < 2 || to <= from {
		return nil
	}
	tick := float64(procstat.Tick) / float64(time.Second)
	var ws []CPUWindow
	for s := from; s < to; s += every {
		e := min(s+every, to)
		a, b := at(samples, s), at(samples, e)
		secs := (e - s).Seconds()
		w := CPUWindow{From: (s - from).Seconds(), To: (e - from).Seconds(), AllIn: (b.busy - a.busy) * tick / secs}
		for _, name := range order {
			if _, ok := b.ticks[name]; ok {
				if w.Groups == nil {
					w.Groups = map[string]float64{}
				}
				w.Groups[name] = (b.ticks[name] - a.ticks[name]) * tick / secs
			}
		}
		for _, c := range charges {
			if c.At >= s && (c.At < e || e == to && c.At == to) {
				w.Charged += c.N
			}
		}
		ws = append(ws, w)
	}
	return ws
}
