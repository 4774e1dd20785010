package load

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run found; report.json is this, report.txt WriteText.
type Report struct {
	RunID      string     `json:"runId"`
	Started    time.Time  `json:"started"`
	Conditions Conditions `json:"conditions"`
	Totals     Totals     `json:"totals"`
	Throughput Throughput `json:"throughput"`
	Latency    []Latency  `json:"latency"`
	// LatencyWindows is the charged latency (Latency[1]) by when the facts
	// were accepted.
	LatencyWindows []LatencyWindow `json:"latencyWindows,omitempty"`
	Relay          []HistStats     `json:"relayCommitToAck"`
	Inbox          []HistStats     `json:"inboxBatchDuration"`
	CPU            CPU             `json:"cpuPerFact"`
	Tenants        []Tenant        `json:"tenants"`
	Closed         []Closed        `json:"closed,omitempty"`
	Alerts         *AlertStats     `json:"alerts,omitempty"`
	Series         []Point         `json:"series"`
	Failures       []string        `json:"failures"`
	Notes          []string        `json:"notes"`
	OK             bool            `json:"ok"`
}

// Conditions are the settings of the run and what is known of the system.
type Conditions struct {
	URLs         map[string]string `json:"urls"`
	Tenants      int               `json:"tenants"`
	Dominant     float64           `json:"dominantShare"`
	Rate         float64           `json:"rateFactsPerSecond"` // 0: flat out
	Batch        int               `json:"batch"`
	Concurrency  int               `json:"concurrency"`
	Duration     string            `json:"duration"`
	Drain        string            `json:"drainTimeout"`
	PollInterval string            `json:"pollIntervalPerTenant"`
	Meter        string            `json:"meter"`
	Properties   int               `json:"properties"`
	UnitPrice    string            `json:"unitPriceUSD"`
	System       map[string]string `json:"system"`
	Cores        int               `json:"cores"`
	GOMAXPROCS   int               `json:"gomaxprocs"`
	Host         string            `json:"host"`
}

// Totals count facts: sent, what usage answered, what query saw. Counted
// and Charged are the load's facts (probes aside).
type Totals struct {
	Sent          int64            `json:"sent"`
	Batches       int64            `json:"batches"`
	Accepted      int64            `json:"accepted"`
	Created       int64            `json:"created201"`
	Replayed      int64            `json:"replayed200"`
	Refused       int64            `json:"refused"`
	RefusedBy     map[string]int64 `json:"refusedBy"`
	ServerErrors  map[string]int64 `json:"serverErrorsBy"` // facts per attempt answered 5xx or not at all
	Retries       int64            `json:"retries"`
	InDoubt       int64            `json:"inDoubt"`
	Probes        int64            `json:"probes"`
	Counted       int64            `json:"countedByQuery"`
	Charged       int64            `json:"chargedInQuery"`
	FellBehind    int64            `json:"senderFellBehind"`
	Polls         int64            `json:"queryPolls"`
	PollErrors    int64            `json:"queryPollErrors"`
	Drained       bool             `json:"drained"`
	DrainSeconds  float64          `json:"drainSeconds"`
	Interrupted   bool             `json:"interrupted"`
	SendSeconds   float64          `json:"sendWindowSeconds"`
	OfferedPerSec float64          `json:"offeredFactsPerSecond"`
}

// Throughput in facts per second.
type Throughput struct {
	AcceptedPerSec  float64 `json:"acceptedPerSecond"`  // accepted / sending window
	EndToEndPerSec  float64 `json:"endToEndPerSecond"`  // charged in query / (first send -> last charge)
	LastChargedSecs float64 `json:"lastChargedSeconds"` // after the first send
}

// Latency is the usage -> query latency of facts, by what query shows.
type Latency struct {
	What      string  `json:"what"`
	Facts     int64   `json:"facts"`
	P50       float64 `json:"p50Seconds"`
	P95       float64 `json:"p95Seconds"`
	P99       float64 `json:"p99Seconds"`
	Max       float64 `json:"maxSeconds"`
	Unreached int64   `json:"unreached"`
	Extra     int64   `json:"extra"`
}

// Tenant is one tenant's account.
type Tenant struct {
	ID       string  `json:"id"`
	Share    float64 `json:"share"`
	Sent     int64   `json:"sent"`
	Accepted int64   `json:"accepted"`
	Probes   int64   `json:"probes"`
	InDoubt  int64   `json:"inDoubt"`
	Counted  int64   `json:"counted"` // probes included
	Charged  int64   `json:"charged"` // probes included
}

// Point is one second of the run, T seconds after the first send.
type Point struct {
	T              float64 `json:"t"`
	AcceptedPerSec float64 `json:"acceptedPerSecond"`
	ChargedPerSec  float64 `json:"chargedPerSecond"`
	Lag            float64 `json:"lag"` // accepted - charged, the most it was during the second
}

// LatencyMethod says how Latency is estimated.
const LatencyMethod = "FIFO-matched estimate: query tells how many facts of a tenant it has counted (usage.count) " +
	"and charged (charged USD / unit price), not which; the k-th fact of a tenant to be counted is taken to be the " +
	"k-th that usage accepted (the response time of its batch), and the moment a count first reached k is taken " +
	"as the midpoint between the poll that saw it and the poll before (error up to half the poll interval). " +
	"Negative estimates are clamped to 0; the probe facts are left out."

func buildReport(o *outcome) *Report {
	cfg := o.cfg
	r := &Report{RunID: cfg.RunID, Started: o.started}
	host, _ := os.Hostname()
	weights := cfg.Weights()
	r.Conditions = Conditions{
		URLs: cfg.URLs, Tenants: cfg.Tenants, Dominant: weights[0], Rate: cfg.Rate, Batch: cfg.Batch,
		Concurrency: cfg.Concurrency, Duration: cfg.Duration.String(), Drain: cfg.Drain.String(),
		PollInterval: max(cfg.Poll, MinPollGap*time.Duration(cfg.Tenants)).String(),
		Meter:        cfg.MeterCode, UnitPrice: cfg.UnitPrice.String(), System: cfg.Describe, Properties: cfg.Properties,
		Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Host: host,
	}

	t := o.tally
	t.mu.Lock()
	r.Totals = Totals{
		Sent: t.sentFacts, Batches: t.sentBatches, Accepted: t.created + t.replayed, Created: t.created,
		Replayed: t.replayed, RefusedBy: t.refused, ServerErrors: t.serverErrs, Retries: t.retries,
		InDoubt: t.inDoubt, FellBehind: t.behind, Polls: o.polls, PollErrors: o.pollErrs,
		Drained: o.drained, DrainSeconds: (o.drainEnd - o.sendEnd).Seconds(), Interrupted: o.interrupted,
		SendSeconds: (o.sendEnd - o.sendStart).Seconds(), OfferedPerSec: cfg.Rate,
	}
	for _, n := range t.refused {
		r.Totals.Refused += n
	}
	var tl timeline
	for i, tt := range t.tenants {
		r.addTenant(cfg.TenantIDs[i], weights[i], tt, o.views[i], &tl)
	}
	t.mu.Unlock()

	if r.Totals.SendSeconds > 0 {
		r.Throughput.AcceptedPerSec = float64(r.Totals.Accepted) / r.Totals.SendSeconds
	}
	if tl.lastCharge > o.sendStart && r.Totals.Charged > 0 {
		r.Throughput.LastChargedSecs = (tl.lastCharge - o.sendStart).Seconds()
		r.Throughput.EndToEndPerSec = float64(r.Totals.Charged) / r.Throughput.LastChargedSecs
	}
	r.LatencyWindows = LatencyWindows(tl.chargeSamples, o.sendStart, o.sendEnd)
	r.Latency[0].fill(tl.countSamples)
	r.Latency[1].fill(tl.chargeSamples)
	if o.cpu != nil {
		r.CPU = o.cpu.figures(cfg, o.sendStart, tl.lastCharge, r.Totals.Charged, tl.charges)
	}
	r.Relay = histDeltas(o.before, o.after, RelayHistogram)
	r.Inbox = histDeltas(o.before, o.after, InboxHistogram)
	r.Series = perSecond(tl.accepts, tl.charges, o.sendStart, max(o.drainEnd, tl.lastCharge))
	r.judge(o)
	r.OK = len(r.Failures) == 0
	return r
}

// timeline is what every tenant's facts add up to over time: the steps of
// their accepts and charges and the latency samples matched from them.
type timeline struct {
	accepts, charges            []Step
	countSamples, chargeSamples []Sample
	lastCharge                  time.Duration
}

// addTenant adds tenant id's figures (tt as sent, v as query saw them) to
// the totals, the tenants and tl, and fails a fact counted or charged
// fewer times or more than usage accepted it.
func (r *Report) addTenant(id string, share float64, tt tenantTally, v tenantView, tl *timeline) {
	r.Totals.Probes += tt.probes
	r.Totals.Counted += v.counted - tt.probes
	r.Totals.Charged += v.charged - tt.probes
	r.Tenants = append(r.Tenants, Tenant{ID: id, Share: share, Sent: tt.sent,
		Accepted: tt.accepted, Probes: tt.probes, InDoubt: tt.inDoubt, Counted: v.counted, Charged: v.charged})
	tl.accepts = append(tl.accepts, tt.accepts...)
	tl.charges = append(tl.charges, v.chargeReach...)
	if n := len(v.chargeReach); n > 0 {
		tl.lastCharge = max(tl.lastCharge, v.chargeReach[n-1].At)
	}
	s, un, ex := MatchFIFO(tt.accepts, v.countReach, tt.probes)
	tl.countSamples = append(tl.countSamples, s...)
	r.addLatency(0, un, ex)
	s, un, ex = MatchFIFO(tt.accepts, v.chargeReach, tt.probes)
	tl.chargeSamples = append(tl.chargeSamples, s...)
	r.addLatency(1, un, ex)
	expected := tt.accepted + tt.probes
	switch {
	case v.counted < expected:
		r.Failures = append(r.Failures, fmt.Sprintf("tenant %s: query counted %d of %d accepted facts: %d not counted",
			id, v.counted, expected, expected-v.counted))
	case v.counted > expected+tt.inDoubt:
		r.Failures = append(r.Failures, fmt.Sprintf("tenant %s: query counted %d facts, usage accepted %d (%d in doubt): %d counted twice",
			id, v.counted, expected, tt.inDoubt, v.counted-expected-tt.inDoubt))
	}
	switch {
	case v.charged < expected:
		r.Failures = append(r.Failures, fmt.Sprintf("tenant %s: %d of %d accepted facts charged (in query): %d not charged",
			id, v.charged, expected, expected-v.charged))
	case v.charged > expected+tt.inDoubt:
		r.Failures = append(r.Failures, fmt.Sprintf("tenant %s: %d facts charged, usage accepted %d (%d in doubt): %d charged twice",
			id, v.charged, expected, tt.inDoubt, v.charged-expected-tt.inDoubt))
	}
	if v.odd != "" {
		r.Failures = append(r.Failures, fmt.Sprintf("tenant %s: %s", id, v.odd))
	}
}

// judge adds the run's failures (5xx answers, an incomplete drain, an
// interruption, a failed close) and notes (failed polls, a sender behind
// its rate, refused facts).
func (r *Report) judge(o *outcome) {
	t, cfg := o.tally, o.cfg
	if len(t.serverErrs) > 0 {
		var parts []string
		for _, k := range sortedKeys(t.serverErrs) {
			parts = append(parts, fmt.Sprintf("%s: %d", k, t.serverErrs[k]))
		}
		r.Failures = append(r.Failures, fmt.Sprintf("usage answered facts with a 5xx or not at all (facts per attempt; %d retries, %d facts left in doubt): %s",
			t.retries, t.inDoubt, strings.Join(parts, ", ")))
	}
	if !o.drained && !o.interrupted {
		r.Failures = append(r.Failures, fmt.Sprintf("not every accepted fact was counted and charged in query within the drain timeout (%s)", cfg.Drain))
	}
	if o.interrupted {
		r.Failures = append(r.Failures, "the run was interrupted: the figures are partial")
	}
	r.Closed = o.closed
	if r.Alerts = o.alerts; r.Alerts != nil {
		for _, p := range r.Alerts.Problems {
			r.Failures = append(r.Failures, "alerts: "+p)
		}
	}
	for _, c := range o.closed {
		if c.Problem != "" {
			r.Failures = append(r.Failures, fmt.Sprintf("closing %s %s: %s", c.Tenant, c.Period, c.Problem))
		}
	}
	r.Notes = append(r.Notes, o.notes...)
	if o.pollErrs > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of %d query polls failed (last: %s)", o.pollErrs, o.polls, o.pollLastErr))
	}
	if t.behind > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("the sender fell more than a second behind the offered rate %d time(s): the system (or this machine) did not take %g facts/s", t.behind, cfg.Rate))
	}
	if r.Totals.Refused > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d facts refused (4xx): not a loss, but the load was not what was asked", r.Totals.Refused))
	}
}

func (r *Report) addLatency(i int, unreached, extra int64) {
	if r.Latency == nil {
		r.Latency = []Latency{{What: "usage -> query counted (usage.count)"}, {What: "usage -> billing -> query charged"}}
	}
	r.Latency[i].Unreached += unreached
	r.Latency[i].Extra += extra
}

func (l *Latency) fill(samples []Sample) {
	for _, s := range samples {
		l.Facts += s.Weight
	}
	ps, ok := Percentiles(samples, 50, 95, 99, 100)
	if ok {
		l.P50, l.P95, l.P99, l.Max = ps[0], ps[1], ps[2], ps[3]
	}
}

// perSecond bins accepted and charged facts by the second after start
// they happened in, up to end. Lag is the largest difference between the
// facts accepted and charged so far (probes included) at any instant of the
// second: charges arrive in bursts, each poll of query bringing a second's
// worth, so the difference at a second's boundary, just after a burst, is
// often 0 while the facts waited hundreds of milliseconds all along.
func perSecond(accepts, charges []Step, start, end time.Duration) []Point {
	n := int(math.Ceil((end - start).Seconds()))
	if n <= 0 {
		return nil
	}
	acc := make([]float64, n)
	ch := make([]float64, n)
	// Every step in time order, accepts as +N and charges as -N; at one
	// instant the charge comes first, so a fact accepted and charged at
	// once adds no lag.
	type change struct {
		at time.Duration
		d  float64
	}
	changes := make([]change, 0, len(accepts)+len(charges))
	add := func(steps []Step, bins []float64, sign float64) {
		for _, s := range steps {
			if b := int((s.At - start) / time.Second); s.At >= start && b < n {
				bins[b] += float64(s.N)
			}
			changes = append(changes, change{s.At, sign * float64(s.N)})
		}
	}
	add(accepts, acc, 1)
	add(charges, ch, -1)
	slices.SortStableFunc(changes, func(a, b change) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(a.d, b.d)
	})
	pts := make([]Point, n)
	lag, k := 0.0, 0
	for ; k < len(changes) && changes[k].at < start; k++ {
		lag += changes[k].d
	}
	for i := range n {
		peak := lag // the lag carried into the second
		until := start + time.Duration(i+1)*time.Second
		for ; k < len(changes) && changes[k].at < until; k++ {
			lag += changes[k].d
			peak = max(peak, lag)
		}
		pts[i] = Point{T: float64(i + 1), AcceptedPerSec: acc[i], ChargedPerSec: ch[i], Lag: peak}
	}
	return pts
}

// WriteFiles writes report.txt, report.json and load.svg into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var txt strings.Builder
	r.WriteText(&txt)
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(txt.String()), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "load.svg"))
	if err != nil {
		return err
	}
	if err := WriteSVG(f, r.PlotData()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ConditionsLine is the conditions in one line, for titles.
func (r *Report) ConditionsLine() string {
	c := r.Conditions
	rate := "flat out"
	if c.Rate > 0 {
		rate = fmt.Sprintf("rate %g/s", c.Rate)
	}
	kafka := "unknown"
	if f := strings.Fields(strings.TrimSuffix(c.System["kafka"], ",")); len(f) > 0 {
		kafka = strings.TrimSuffix(f[0], ",")
	}
	return fmt.Sprintf("%s, %s, %d tenant(s) (tenant 0 %.0f%%), batch %d, concurrency %d, Kafka %s, %d cores",
		c.Duration, rate, c.Tenants, 100*c.Dominant, c.Batch, c.Concurrency, kafka, c.Cores)
}

func ms(s float64) string {
	switch {
	case s >= 10:
		return fmt.Sprintf("%.1fs", s)
	case s >= 1:
		return fmt.Sprintf("%.2fs", s)
	}
	return fmt.Sprintf("%.1fms", s*1000)
}

// WriteText writes the report for people.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "LOAD REPORT %s (started %s)\n", r.RunID, r.Started.Format(time.RFC3339))
	r.writeConditions(w)
	r.writeTotals(w)
	r.writeSpeed(w)
	r.writeCPU(w)
	writeHistogram(w, "Outbox relay, commit -> broker ack ("+RelayHistogram+", /metrics delta over the run)", r.Relay, "rows")
	writeHistogram(w, "Inbox, decide and commit one consumed batch ("+InboxHistogram+", /metrics delta)", r.Inbox, "batches")
	fmt.Fprintln(w, "percentiles from histogram buckets, interpolated linearly inside a bucket (as histogram_quantile)")
	r.writeTenants(w)
	r.writeClosed(w)
	r.writeAlerts(w)
	r.writeVerdict(w)
}

// textSection writes a section's title and returns a table writer for its
// body.
func textSection(w io.Writer, title string) *tabwriter.Writer {
	fmt.Fprintf(w, "\n%s\n%s\n", title, strings.Repeat("-", len(title)))
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

func (r *Report) writeConditions(w io.Writer) {
	c := r.Conditions
	tw := textSection(w, "Conditions")
	for _, s := range Services {
		fmt.Fprintf(tw, "%s\t%s\n", s, c.URLs[s])
	}
	for _, k := range sortedKeys(c.System) {
		fmt.Fprintf(tw, "%s\t%s\n", k, c.System[k])
	}
	rate := "flat out"
	if c.Rate > 0 {
		rate = fmt.Sprintf("%g facts/s offered", c.Rate)
	}
	fmt.Fprintf(tw, "load\t%s for %s, batches of %d, %d request(s) in flight\n", rate, c.Duration, c.Batch, c.Concurrency)
	fmt.Fprintf(tw, "tenants\t%d, tenant 0 gets %.1f%% of the facts, the rest evenly\n", c.Tenants, 100*c.Dominant)
	fmt.Fprintf(tw, "facts\tquantity 1 of meter %s at USD %s, unique sourceEventId, occurredAt now, %d properties\n", c.Meter, c.UnitPrice, c.Properties)
	fmt.Fprintf(tw, "query polls\tevery tenant's summary every %s; drain timeout %s\n", c.PollInterval, c.Drain)
	fmt.Fprintf(tw, "machine\t%s, %d cores (GOMAXPROCS %d), shared by the load tool and whatever runs there\n", c.Host, c.Cores, c.GOMAXPROCS)
	tw.Flush()
}

func (r *Report) writeTotals(w io.Writer) {
	t := r.Totals
	tw := textSection(w, "Totals (facts)")
	fmt.Fprintf(tw, "sent\t%d in %d batches over %.1fs\n", t.Sent, t.Batches, t.SendSeconds)
	fmt.Fprintf(tw, "accepted by usage\t%d (201: %d, 200 replay after a retry: %d)\n", t.Accepted, t.Created, t.Replayed)
	fmt.Fprintf(tw, "refused by usage\t%d%s\n", t.Refused, byKey(t.RefusedBy))
	fmt.Fprintf(tw, "5xx or no answer\t%d fact-attempts%s; %d retries; %d facts in doubt\n", sum(t.ServerErrors), byKey(t.ServerErrors), t.Retries, t.InDoubt)
	fmt.Fprintf(tw, "counted by query\t%d (plus %d probe facts)\n", t.Counted, t.Probes)
	fmt.Fprintf(tw, "charged in query\t%d (plus %d probe facts)\n", t.Charged, t.Probes)
	drain := "drained"
	if !t.Drained {
		drain = "NOT drained"
	}
	fmt.Fprintf(tw, "after sending\t%s in %.1fs; %d query polls (%d failed)\n", drain, t.DrainSeconds, t.Polls, t.PollErrors)
	tw.Flush()
}

// writeSpeed writes the throughput and the latency per fact.
func (r *Report) writeSpeed(w io.Writer) {
	tp := r.Throughput
	tw := textSection(w, "Throughput (facts/s)")
	fmt.Fprintf(tw, "accepted, sustained\t%.0f/s\t(accepted over the %.1fs sending window)\n", tp.AcceptedPerSec, r.Totals.SendSeconds)
	fmt.Fprintf(tw, "end to end, charged in query\t%.0f/s\t(charged over %.1fs, from the first send to the moment the last fact was charged)\n", tp.EndToEndPerSec, tp.LastChargedSecs)
	tw.Flush()

	tw = textSection(w, "Latency per fact, usage accepted -> visible in query")
	fmt.Fprintln(tw, "what\tfacts\tp50\tp95\tp99\tmax")
	for _, l := range r.Latency {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", l.What, l.Facts, ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max))
	}
	tw.Flush()
	fmt.Fprintf(w, "method: %s\n", LatencyMethod)
	if len(r.LatencyWindows) < 2 {
		return
	}
	tw = textSection(w, "Latency by when the facts were accepted (usage -> billing -> query charged)")
	fmt.Fprintln(tw, "seconds\tfacts\tp50\tp95\tp99\tmax")
	for _, l := range r.LatencyWindows {
		fmt.Fprintf(tw, "%.0f-%.0f\t%d\t%s\t%s\t%s\t%s\n", l.From, l.To, l.Facts, ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max))
	}
	tw.Flush()
}

// writeCPU writes the CPU per fact: all-in, per process group, and their
// ratios to the floor.
func (r *Report) writeCPU(w io.Writer) {
	c := r.CPU
	tw := textSection(w, "CPU per fact (CPU-ms per fact charged, first send -> last charge)")
	floor := func(v float64) string {
		if c.Floor <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1fx", v/c.Floor)
	}
	if c.Facts > 0 && c.WindowSeconds > 0 {
		fmt.Fprintln(tw, "what\tCPU-ms/fact\tshare\tto the floor")
		for _, g := range c.Groups {
			fmt.Fprintf(tw, "%s\t%.3f\t%.0f%%\t%s\n", g.Name, g.PerFact, 100*g.Share, floor(g.PerFact))
		}
		if len(c.Groups) > 0 {
			fmt.Fprintf(tw, "the system and the load tool (the rows above)\t%.3f\t%.0f%%\t%s\n", c.System, 100*c.System/c.AllIn, floor(c.System))
			fmt.Fprintf(tw, "rest of the machine (kernel, other processes)\t%.3f\t%.0f%%\t\n", c.Rest, 100*c.Rest/c.AllIn)
		}
		fmt.Fprintf(tw, "all-in (the machine's busy CPU, /proc/stat)\t%.3f\t100%%\t%s\n", c.AllIn, floor(c.AllIn))
		tw.Flush()
		fmt.Fprintf(w, "window %.1fs, %d facts charged, machine %.0f%% busy (%d cores)", c.WindowSeconds, c.Facts, 100*c.MachineBusy, c.Cores)
		if c.Floor > 0 {
			fmt.Fprintf(w, "; the floor: PostgreSQL %.3f CPU-ms per fact (%s)", c.Floor, c.FloorSource)
		}
		fmt.Fprintln(w)
	} else {
		tw.Flush()
	}
	if c.Note != "" {
		fmt.Fprintln(w, "note: "+c.Note)
	}
	r.writeCPUWindows(w)
}

// writeCPUWindows writes the cores each group kept busy, a window at a
// time, next to the facts charged and the lag at the window's end.
func (r *Report) writeCPUWindows(w io.Writer) {
	c := r.CPU
	if len(c.Windows) < 2 {
		return
	}
	tw := textSection(w, "CPU over the run (cores busy, each window; the lag at its end)")
	fmt.Fprint(tw, "seconds\tcharged/s\tlag")
	for _, g := range c.Groups {
		fmt.Fprintf(tw, "\t%s", g.Name)
	}
	fmt.Fprintln(tw, "\tall-in")
	for _, win := range c.Windows {
		fmt.Fprintf(tw, "%.0f-%.0f\t%.0f\t%s", win.From, win.To, float64(win.Charged)/(win.To-win.From), r.lagAt(win.To))
		for _, g := range c.Groups {
			fmt.Fprintf(tw, "\t%.2f", win.Groups[g.Name])
		}
		fmt.Fprintf(tw, "\t%.2f\n", win.AllIn)
	}
	tw.Flush()
}

// lagAt is the lag in the series' second that holds t (seconds since the
// first send), or "-" when the series does not reach it.
func (r *Report) lagAt(t float64) string {
	for i := len(r.Series) - 1; i >= 0; i-- {
		if r.Series[i].T <= t {
			return fmt.Sprintf("%.0f", r.Series[i].Lag)
		}
	}
	return "-"
}

// writeHistogram writes the services' figures of one histogram.
func writeHistogram(w io.Writer, title string, hs []HistStats, unit string) {
	tw := textSection(w, title)
	if len(hs) == 0 {
		fmt.Fprintln(tw, "(no service exported it)")
		tw.Flush()
		return
	}
	fmt.Fprintf(tw, "service\t%s\tmean\tp50\tp95\tp99\n", unit)
	for _, h := range hs {
		mean := "-"
		if h.Count > 0 {
			mean = ms(h.Mean)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\n", h.Service, h.Count, mean,
			over(h, 0, h.P50), over(h, 1, h.P95), over(h, 2, h.P99))
	}
	tw.Flush()
}

func (r *Report) writeTenants(w io.Writer) {
	tw := textSection(w, "Per tenant (counted and charged include the probe fact)")
	fmt.Fprintln(tw, "tenant\tshare\tsent\taccepted\tprobe\tin doubt\tcounted\tcharged")
	for _, tn := range r.Tenants {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d\t%d\t%d\t%d\t%d\t%d\n", tn.ID, 100*tn.Share, tn.Sent, tn.Accepted, tn.Probes, tn.InDoubt, tn.Counted, tn.Charged)
	}
	tw.Flush()
}

// writeClosed writes the closes of -close, when there were any.
func (r *Report) writeClosed(w io.Writer) {
	if len(r.Closed) == 0 {
		return
	}
	tw := textSection(w, "Close (-close): POST close, then the invoice issued and visible in query, timed from the close's answer")
	fmt.Fprintln(tw, "tenant\tperiod\tclose answered\tinvoice issued\tin query\tnumber\tcharge lines\tcharges (want)\ttotal (want)\treconciled\tmismatches")
	for _, c := range r.Closed {
		reconciled := "not run (no operator token)"
		switch {
		case c.Reconciled:
			reconciled = fmt.Sprintf("in %s", secs(c.ReconcileSeconds))
		case c.ReconcileRun:
			reconciled = "no answer (see the problem)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t+%s\t+%s\t%d\t%d\t%d (%d)\t%s (%s)\t%s\t%d\n", c.Tenant, c.Period, secs(c.CloseSeconds),
			secs(c.IssuedSeconds), secs(c.InQuerySeconds), c.Number, c.ChargeLines, c.ChargeCount, c.WantChargeCount, c.Total, c.WantTotal,
			reconciled, c.Mismatches)
	}
	tw.Flush()
}

// writeVerdict writes the notes, then OK or the failures.
func (r *Report) writeVerdict(w io.Writer) {
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range r.Notes {
			fmt.Fprintln(w, "  - "+n)
		}
	}
	fmt.Fprintln(w)
	if r.OK {
		fmt.Fprintf(w, "OK: every one of the %d accepted facts (and %d probes) was counted and charged in query exactly once; no 5xx.\n", r.Totals.Accepted, r.Totals.Probes)
		return
	}
	fmt.Fprintf(w, "FAILED: %d problem(s):\n", len(r.Failures))
	for _, f := range r.Failures {
		fmt.Fprintln(w, "  - "+f)
	}
}

func over(h HistStats, i int, v float64) string {
	if h.Count <= 0 {
		return "-"
	}
	if i < len(h.Over) && h.Over[i] {
		return ">" + ms(v)
	}
	return ms(v)
}

func byKey(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
