package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Decisions counts the inbox decisions of every service instance from its
// inbox_decisions_total{outcome,event_type} counter at /metrics.
//
// How real duplicates are counted. The services do not record a DUPLICATE
// decision in their databases (inbox_event holds applied events only), so
// the count comes from the counter, which is kept in process memory and
// starts again at zero when a process restarts. Decisions therefore
// follows each instance's process lifetimes: it scrapes every instance
// once a second, keys what it reads by the process id the stack reports,
// banks a lifetime's last reading when the process id changes (or the
// counter goes down), and is told to Flush an instance just before the
// suite kills it. A service's total is the sum over its instances and
// their lifetimes. Decisions committed in the last moments before an
// unannounced crash, after the last scrape, are missed: the count can
// only be low, never invent a duplicate. Scraping runs between faults
// too, so a count taken after quiescence includes every decision made by
// a process that is still running.
type Decisions struct {
	instances func() []Instance
	http      *http.Client

	mu     sync.Mutex
	life   map[string]*lifetime // by instance name
	banked Counts
	// gone holds the pids whose lifetime was banked, so a scrape that
	// raced with the kill cannot count that lifetime twice.
	gone map[int]bool
	errs map[string]int
}

// Instance is one running process of a service, as the stack knows it.
type Instance struct {
	Service string
	Index   int
	URL     string
	PID     int // 0 when not running
}

func (in Instance) name() string { return fmt.Sprintf("%s.%d", in.Service, in.Index) }

type lifetime struct {
	pid    int
	counts Counts
}

// Counts are decision counts by service, outcome and event type.
type Counts map[string]map[string]map[string]float64

func (c Counts) add(service, outcome, eventType string, v float64) {
	if c[service] == nil {
		c[service] = map[string]map[string]float64{}
	}
	if c[service][outcome] == nil {
		c[service][outcome] = map[string]float64{}
	}
	c[service][outcome][eventType] += v
}

func (c Counts) addAll(o Counts) {
	for s, byOutcome := range o {
		for out, byType := range byOutcome {
			for t, v := range byType {
				c.add(s, out, t, v)
			}
		}
	}
}

// Sub returns c - o.
func (c Counts) Sub(o Counts) Counts {
	d := Counts{}
	d.addAll(c)
	for s, byOutcome := range o {
		for out, byType := range byOutcome {
			for t, v := range byType {
				d.add(s, out, t, -v)
			}
		}
	}
	return d
}

// Outcome returns the count of outcome at service (every service when
// empty), for the event types given (all when none).
func (c Counts) Outcome(service, outcome string, eventTypes ...string) int {
	total := 0.0
	for s, byOutcome := range c {
		if service != "" && s != service {
			continue
		}
		for t, v := range byOutcome[outcome] {
			if len(eventTypes) == 0 || containsString(eventTypes, t) {
				total += v
			}
		}
	}
	return int(total + 0.5)
}

func containsString(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// NewDecisions returns a counter over the instances the function lists.
func NewDecisions(instances func() []Instance) *Decisions {
	return &Decisions{
		instances: instances, http: &http.Client{Timeout: 3 * time.Second},
		life: map[string]*lifetime{}, banked: Counts{}, errs: map[string]int{}, gone: map[int]bool{},
	}
}

// Run scrapes every instance every interval until ctx ends.
func (d *Decisions) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		d.ScrapeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ScrapeAll scrapes every instance once.
func (d *Decisions) ScrapeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, in := range d.instances() {
		wg.Go(func() { d.scrape(ctx, in) })
	}
	wg.Wait()
}

// Flush scrapes one instance now: call it just before killing it.
func (d *Decisions) Flush(ctx context.Context, service string, index int) {
	for _, in := range d.instances() {
		if in.Service == service && in.Index == index {
			d.scrape(ctx, in)
		}
	}
}

func (d *Decisions) scrape(ctx context.Context, in Instance) {
	if in.PID == 0 {
		d.mu.Lock()
		d.bankLocked(in.name())
		d.mu.Unlock()
		return
	}
	counts, err := d.read(ctx, in.URL)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.errs[in.name()]++
		return
	}
	if d.gone[in.PID] {
		return
	}
	l := d.life[in.name()]
	if l != nil && (l.pid != in.PID || decreased(l.counts, counts)) {
		d.bankLocked(in.name())
		l = nil
	}
	d.life[in.name()] = &lifetime{pid: in.PID, counts: counts}
}

func (d *Decisions) bankLocked(name string) {
	if l := d.life[name]; l != nil {
		d.banked.addAll(l.counts)
		d.gone[l.pid] = true
		delete(d.life, name)
	}
}

// decreased reports whether any counter of before is above after: a new
// process behind the same pid (never in practice) or a counter reset.
func decreased(before, after Counts) bool {
	for s, byOutcome := range before {
		for out, byType := range byOutcome {
			for t, v := range byType {
				if after[s][out][t] < v {
					return true
				}
			}
		}
	}
	return false
}

// Total returns the decisions counted so far.
func (d *Decisions) Total() Counts {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := Counts{}
	out.addAll(d.banked)
	for _, l := range d.life {
		out.addAll(l.counts)
	}
	return out
}

// read fetches one instance's inbox_decisions_total.
func (d *Decisions) read(ctx context.Context, base string) (Counts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	return parseDecisions(bufio.NewScanner(resp.Body))
}

// parseDecisions reads the inbox_decisions_total samples of a Prometheus
// text exposition.
func parseDecisions(sc *bufio.Scanner) (Counts, error) {
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	out := Counts{}
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "inbox_decisions_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		l := parseLabels(labels)
		out.add(l["service"], l["outcome"], l["event_type"], v)
	}
	return out, sc.Err()
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		name, rest, ok := strings.Cut(s, "=\"")
		if !ok {
			break
		}
		end := 0
		for end < len(rest) && rest[end] != '"' {
			if rest[end] == '\\' {
				end++
			}
			end++
		}
		if end > len(rest) {
			end = len(rest)
		}
		out[strings.TrimPrefix(name, ",")] = rest[:end]
		if end+1 >= len(rest) {
			break
		}
		s = rest[end+1:]
	}
	return out
}
