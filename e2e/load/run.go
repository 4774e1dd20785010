package load

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// SettleTime is how long the sampler keeps polling after every fact was
// seen counted and charged: a fact counted or charged twice would show
// after the drain.
const SettleTime = 3 * time.Second

// outcome is everything a run observed, for the report.
type outcome struct {
	cfg         *Config
	started     time.Time
	origin      time.Time
	sendStart   time.Duration
	sendEnd     time.Duration
	drainEnd    time.Duration
	drained     bool
	interrupted bool
	tally       *tally
	views       []tenantView
	closed      []Closed
	alerts      *AlertStats
	polls       int64
	pollErrs    int64
	pollLastErr string
	before      scrape
	after       scrape
	cpu         *cpuMeter
	notes       []string
}

// Run drives the load cfg describes and returns its report. An error means
// the run could not take place (bad settings, setup failed); a run that
// took place returns a report, whose OK says whether the system kept its
// promises.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.Defaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	progress := func(format string, args ...any) { fmt.Fprintf(cfg.Out, "==> "+format+"\n", args...) }
	cl, err := newClient(&cfg)
	if err != nil {
		return nil, err
	}
	o := &outcome{cfg: &cfg, started: time.Now().UTC(), origin: time.Now(), tally: newTally(cfg.Tenants)}
	smp := newSampler(&cfg, cl, o.origin)
	if err := o.setup(ctx, cl, smp, progress); err != nil {
		return nil, err
	}
	var alerts *alertWatch
	if cfg.Alerts > 0 {
		if alerts, err = setupAlerts(ctx, &cfg, cl, progress); err != nil {
			return nil, err
		}
	}

	pollCtx, stopPolls := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { smp.run(pollCtx) })
	announce(&cfg, progress)
	// Send, printing progress every second.
	phase := &phaseClock{name: "send", since: time.Now()}
	stopTicker := make(chan struct{})
	bg.Go(func() { o.ticker(smp, phase, stopTicker) })
	o.cpu = startCPUMeter(cfg.Processes, o.origin)
	o.send(ctx, cl)
	o.drainAndSettle(ctx, smp, phase, progress)
	o.cpu.finish()
	stopPolls()
	close(stopTicker)
	bg.Wait()
	if alerts != nil {
		progress("-alerts: waiting up to %s for the webhooks of the thresholds reached", AlertWait)
		o.alerts = alerts.collect(ctx, o.tally.reached(), AlertWait)
	}
	if cfg.Close && o.drained && ctx.Err() == nil {
		o.closeAll(ctx, cl, progress)
	}
	if alerts != nil {
		alerts.finish(context.Background(), cl)
	}
	o.finish(smp, cl)
	return buildReport(o), nil
}

// setup reads the baseline, activates the prices, sends a probe fact per
// tenant and scrapes the services' metrics before the run.
func (o *outcome) setup(ctx context.Context, cl *client, smp *sampler, progress func(string, ...any)) error {
	if err := smp.baseline(ctx); err != nil {
		return err
	}
	if err := activatePrices(ctx, o.cfg, cl, progress); err != nil {
		return err
	}
	if err := probe(ctx, o.cfg, cl, o.tally, o.origin, progress); err != nil {
		return err
	}
	var err error
	o.before, err = scrapeAll(ctx, cl)
	if err != nil {
		o.notes = append(o.notes, "at the start: "+err.Error())
	}
	return nil
}

// announce says what the run is about to send.
func announce(cfg *Config, progress func(string, ...any)) {
	rate := "flat out"
	if cfg.Rate > 0 {
		rate = fmt.Sprintf("%g facts/s", cfg.Rate)
	}
	limit := ""
	if cfg.Facts > 0 {
		limit = fmt.Sprintf(" or until %d facts are sent", cfg.Facts)
	}
	progress("sending for %s%s, %s, batches of %d, %d in flight, %d tenant(s); polling query every %s per tenant",
		cfg.Duration, limit, rate, cfg.Batch, cfg.Concurrency, cfg.Tenants, max(cfg.Poll, MinPollGap*time.Duration(cfg.Tenants)))
}

// send sends facts for the configured duration, or until ctx ends.
func (o *outcome) send(ctx context.Context, cl *client) {
	d := &driver{cfg: o.cfg, cl: cl, tally: o.tally, origin: o.origin}
	o.sendStart = time.Since(o.origin)
	sendCtx, stopSending := context.WithTimeout(ctx, o.cfg.Duration)
	d.run(sendCtx, ctx)
	stopSending()
	o.sendEnd = time.Since(o.origin)
	o.interrupted = ctx.Err() != nil
}

// drainAndSettle waits for query to count and charge every accepted fact
// (unless the run was interrupted), then, drained, lets the system settle.
func (o *outcome) drainAndSettle(ctx context.Context, smp *sampler, phase *phaseClock, progress func(string, ...any)) {
	if !o.interrupted {
		phase.set("drain")
		progress("sending stopped after %s; waiting up to %s for query to count and charge every accepted fact",
			(o.sendEnd - o.sendStart).Round(100*time.Millisecond), o.cfg.Drain)
		o.drained = o.drain(ctx, smp)
		o.interrupted = ctx.Err() != nil
	}
	o.drainEnd = time.Since(o.origin)
	if o.drained {
		phase.set("settle")
		select {
		case <-ctx.Done():
		case <-time.After(SettleTime):
		}
	}
}

// closeAll closes every tenant's period of the run and times its invoice.
func (o *outcome) closeAll(ctx context.Context, cl *client, progress func(string, ...any)) {
	period := o.started.Format("2006-01")
	accepted := make([]int64, len(o.cfg.TenantIDs))
	o.tally.mu.Lock()
	for i, tt := range o.tally.tenants {
		accepted[i] = tt.accepted + tt.probes
	}
	o.tally.mu.Unlock()
	progress("closing period %s of every tenant and timing its invoice (issued, then visible in query)", period)
	o.closed = closePeriods(ctx, o.cfg, cl, period, accepted, o.cfg.CloseTimeout, progress)
}

// reached is, per tenant, the facts accepted (probes included): once
// drained, its meter's period quantity.
func (t *tally) reached() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int64, len(t.tenants))
	for i, tt := range t.tenants {
		out[i] = tt.accepted + tt.probes
	}
	return out
}

// finish takes a last reading of every tenant and of the services' metrics.
func (o *outcome) finish(smp *sampler, cl *client) {
	fctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	smp.round(fctx) // a last reading of every tenant
	var err error
	o.after, err = scrapeAll(fctx, cl)
	if err != nil {
		o.notes = append(o.notes, "at the end: "+err.Error())
	}
	o.views = make([]tenantView, o.cfg.Tenants)
	for i := range o.views {
		o.views[i] = smp.view(i)
	}
	smp.mu.Lock()
	o.polls, o.pollErrs, o.pollLastErr = smp.polls, smp.pollErrs, smp.lastErr
	smp.mu.Unlock()
}

func (o *outcome) drain(ctx context.Context, smp *sampler) bool {
	deadline := time.After(o.cfg.Drain)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	expected := o.tally.expected()
	for {
		if smp.caughtUp(expected) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
}

// phaseClock names the phase the progress line shows.
type phaseClock struct {
	mu    sync.Mutex
	name  string
	since time.Time
}

func (p *phaseClock) set(name string) {
	p.mu.Lock()
	p.name, p.since = name, time.Now()
	p.mu.Unlock()
}

func (p *phaseClock) get() (string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name, time.Since(p.since)
}

// ticker prints one progress line a second until stop closes.
func (o *outcome) ticker(smp *sampler, phase *phaseClock, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prevAcc, prevCharged int64
	prevAt := time.Now()
	probes := int64(o.cfg.Tenants)
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s := o.tally.snapshot()
		counted, charged := smp.totals()
		now := time.Now()
		dt := now.Sub(prevAt).Seconds()
		accRate := float64(s.Accepted-prevAcc) / dt
		chRate := float64(charged-prevCharged) / dt
		prevAcc, prevCharged, prevAt = s.Accepted, charged, now
		name, in := phase.get()
		var b strings.Builder
		fmt.Fprintf(&b, "%-6s %4.0fs  sent %d  accepted %d (%.0f/s)", name, in.Seconds(), s.Sent, s.Accepted, accRate)
		if s.Refused > 0 {
			fmt.Fprintf(&b, "  refused %d", s.Refused)
			for _, k := range sortedKeys(s.RefusedBy) {
				fmt.Fprintf(&b, " [%s: %d]", k, s.RefusedBy[k])
			}
		}
		if s.ServerErrors > 0 {
			fmt.Fprintf(&b, "  5xx/no answer %d", s.ServerErrors)
		}
		// Counted and charged include the probe facts; show the load's.
		fmt.Fprintf(&b, "  | query counted %d  charged %d (%.0f/s)  lag %d",
			max(counted-probes, 0), max(charged-probes, 0), chRate, s.Accepted+probes-charged)
		fmt.Fprintln(o.cfg.Out, b.String())
	}
}
