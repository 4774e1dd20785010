package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/pkg/events"
)

// Config shapes a soak run.
type Config struct {
	Duration time.Duration
	Rate     int // facts per second over every tenant
	Seed     uint64
	// Sample is the watch's interval.
	Sample time.Duration
	// Progress receives a line now and then.
	Progress func(format string, args ...any)
	// Pprof is each service's PPROF_ADDR; Out the directory the heap and
	// goroutine profiles are written to (heap-<service>-warm.pb.gz and
	// goroutine-<service>-warm.pb.gz after warm-up, -end at the end of the
	// load).
	Pprof map[string]string
	Out   string
	// Clock is the services' clock (their CLOCK_OFFSET_FILE, decision
	// 0015); CloseEvery how often the soak moves it past a period's end
	// plus grace for billing's scheduler to close the period (closeLoop),
	// once at half time when not shorter than Duration; 0 or a nil Clock
	// closes periods only at the end.
	Clock      *scenario.OffsetClock
	CloseEvery time.Duration
}

// Key names the run's tenants (soak-acme, soak-globex, soak-initech) and
// Dominant its dominant tenant, who sends DominantShare of the facts.
const (
	Key           = "soak"
	Dominant      = "soak-dominant"
	DominantShare = 0.6
)

// Result is what a run saw.
type Result struct {
	Config    Config
	Row       *chaos.Row
	Recon     *chaos.Reconciliation
	Faults    []*Fault
	Series    map[string][]Point // T in seconds since the load began
	Latency   []MinuteLatency
	Flat      []Flat
	Problems  []string
	LoadStart time.Time
	Took      time.Duration
	Churn     Churn
	Plans     PlanChurn
	// Closes are the periods billing's scheduler closed under the moved
	// clock while the soak ran.
	Closes []*Close
	// PeakRSS is the test process's peak resident memory (VmHWM).
	PeakRSS float64
	// SettledAt is when every consumer group first held its partitions
	// (seconds after the load began), -1 when never seen.
	SettledAt float64
}

// MinuteLatency is usage -> charged in billing for the facts that occurred
// in one minute of the run: from the time the load first sent a fact (its
// occurredAt) to billing's charge row (created_at).
type MinuteLatency struct {
	Minute        int
	Facts         int64
	P50, P95, P99 float64 // seconds
}

// OK reports whether the run passed: reconciled with nothing lost,
// duplicated or mismatched, every fault injected, every resource series
// flat.
func (r *Result) OK() bool { return len(r.Problems) == 0 }

// Run soaks the stack under h: the chaos suite's load at cfg.Rate over
// four tenants (one dominant) for cfg.Duration, price versions activated
// every three minutes, a fault drawn from Kinds every minute, the system
// watched every cfg.Sample; then it lets the system come to rest, closes
// the periods, reconciles (the chaos suite's RunScenario) and runs the
// slope test.
func Run(ctx context.Context, h *chaos.Harness, cfg Config) (*Result, error) {
	began := time.Now()
	res := &Result{Config: cfg}
	progress := cfg.Progress
	var (
		run    *chaos.Run
		ready  = make(chan struct{})
		faults []*Fault
		fmu    sync.Mutex
	)
	mainFacts := int(float64(cfg.Rate) * cfg.Duration.Seconds() * (1 - DominantShare))
	domFacts := int(float64(cfg.Rate) * cfg.Duration.Seconds() * DominantShare)
	changes := func(offset time.Duration) []chaos.PriceChange {
		var out []chaos.PriceChange
		for at := offset; at < cfg.Duration-30*time.Second; at += 3 * time.Minute {
			out = append(out, chaos.PriceChange{At: at.Seconds() / cfg.Duration.Seconds(), Lead: 20 * time.Second})
		}
		return out
	}
	var dom *chaos.Load
	var gate *chaos.Gate
	now := time.Now
	if cfg.Clock != nil {
		gate, now = &chaos.Gate{}, cfg.Clock.Now
	}
	hooks := res.Churn.Receiver()
	defer hooks.Close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watch *Watch
	var watchers sync.WaitGroup
	sc := chaos.Scenario{
		Key: Key, Title: "soak",
		// The chaos suite's Reconcile holds every row of every database in
		// memory; an hour's millions of facts need the streaming one.
		Reconcile: chaos.ReconcileStream,
		Load: chaos.LoadConfig{
			Facts: mainFacts, Duration: cfg.Duration, Workers: 12, MaxBatch: 40, DuplicateRate: 0.01,
			PriceChanges: changes(2 * time.Minute), Clock: now, Gate: gate,
		},
		Setup: func(ctx context.Context, r *chaos.Run) error {
			run = r
			r.Extra = append(r.Extra, Dominant)
			dom = chaos.NewLoad(h.Client, r.Ledger, chaos.LoadConfig{
				Name: Key + "-dom", Tenants: []string{Dominant}, Facts: domFacts, Duration: cfg.Duration,
				Workers: 10, MaxBatch: 100, DuplicateRate: 0.01, PriceChanges: changes(3 * time.Minute), Progress: progress,
				Clock: now, Gate: gate,
			})
			if err := dom.ActivateInitialPrices(ctx); err != nil {
				return fmt.Errorf("the dominant tenant's prices: %w", err)
			}
			watch = NewWatch(h, r.Ledger, cfg.Sample, time.Now())
			watchers.Go(func() { watch.Run(watchCtx) })
			watchers.Go(func() { heapProfiles(watchCtx, cfg, progress) })
			close(ready)
			return nil
		},
		Faults: func(ctx context.Context, r *chaos.Run) error {
			var wg sync.WaitGroup
			var domErr, faultErr error
			wg.Go(func() { domErr = dom.Run(ctx) })
			wg.Go(func() { churnPlans(ctx, h, r.Tenants[1], cfg.Duration, &res.Plans) })
			wg.Go(func() {
				churnWebhooks(ctx, h, hooks, append(r.Tenants, Dominant), Dominant, cfg.Duration, &res.Churn)
			})
			wg.Go(func() {
				faultErr = faultLoop(ctx, h, r, cfg, &fmu, &faults)
			})
			if gate != nil {
				wg.Go(func() { closeLoop(ctx, h, r, cfg, gate, append(r.Tenants, Dominant), &res.Closes) })
			}
			wg.Wait()
			if domErr != nil {
				return fmt.Errorf("the dominant tenant's load: %w", domErr)
			}
			if err := closeDominant(ctx, h, r); err != nil {
				return errors.Join(faultErr, err)
			}
			return faultErr
		},
	}
	row, r, err := h.RunScenario(ctx, sc)
	res.Row = row
	if r != nil {
		res.Recon = r.Recon
		res.LoadStart = r.LoadStart
	}
	select {
	case <-ready:
	default:
		return res, fmt.Errorf("the soak never started: %v", err)
	}
	sleep(ctx, 2*cfg.Sample) // a few readings at rest
	stopWatch()
	watchers.Wait()
	res.Faults = faults
	res.Series = shift(watch.Series(), run.LoadStart.Sub(watch.Origin).Seconds())
	res.Took = time.Since(began)
	if err != nil {
		res.Problems = append(res.Problems, "the run stopped: "+err.Error())
	}
	res.judge(row)
	res.judgeChurn(ctx)
	if res.Plans.Subscribed == 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("plan churn not proven: no subscription changed (%d plans published, %d attempts failed%s)",
			res.Plans.Published, res.Plans.Failures, lastFailure(res.Plans.Last)))
	}
	lat, lerr := latency(ctx, h, append(chaos.Tenants(Key), Dominant), run.LoadStart, res.Closes)
	if lerr != nil {
		res.Problems = append(res.Problems, "latency: "+lerr.Error())
	}
	res.Latency = lat
	res.PeakRSS = peakRSS()
	return res, nil
}

// faultLoop injects one fault a minute (sometimes two) until the load's
// duration is nearly over, and waits for each fault's recovery.
func faultLoop(ctx context.Context, h *chaos.Harness, r *chaos.Run, cfg Config, mu *sync.Mutex, out *[]*Fault) error {
	plan := NewPlan(cfg.Seed)
	services := h.Stack.Services()
	var recovering sync.WaitGroup
	var last *Fault
	var errs []error
	one := func(kind, target string, d time.Duration) {
		f := &Fault{Kind: kind, Target: target, Start: time.Now()}
		mu.Lock()
		f.Overlapping = last != nil && (last.Recovery == 0 && last.RecoverErr == nil)
		*out = append(*out, f)
		mu.Unlock()
		h.Progress("soak: fault %s on %s for %s at %s%s", kind, target, d, r.Since().Round(time.Second),
			map[bool]string{true: " (the previous one still recovering)"}[f.Overlapping])
		f.Err = inject(ctx, h, kind, target, d)
		f.End = time.Now()
		if f.Err != nil {
			errs = append(errs, fmt.Errorf("fault %s on %s: %w", kind, target, f.Err))
		}
		last = f
		recovering.Go(func() {
			d, err := recovered(ctx, h, r.Ledger, f.Start.Add(-10*time.Second), f.End, 6*time.Minute)
			mu.Lock()
			f.Recovery, f.RecoverErr = d, err
			mu.Unlock()
			if err == nil {
				h.Progress("soak: caught up %s after %s on %s", d.Round(100*time.Millisecond), kind, target)
			} else {
				h.Progress("soak: NOT caught up after %s on %s: %v", kind, target, err)
			}
		})
	}
	for minute := 1; ; minute++ {
		at := time.Duration(minute)*time.Minute + plan.Offset()
		kind, target, d := plan.Next(services)
		storm, gap := plan.Storm()
		if at+d > cfg.Duration-10*time.Second {
			break
		}
		// A fault whose injection or restart took longer than its minute
		// (a broker restart on a loaded machine) must not be followed by
		// the minutes it overran, fired back to back: those are skipped.
		if r.Since() > at+15*time.Second {
			h.Progress("soak: minute %d's fault skipped: the previous one ran %s past it", minute, (r.Since() - at).Round(time.Second))
			continue
		}
		if !r.At(ctx, at) {
			break
		}
		one(kind, target, d)
		if storm {
			k2, t2, d2 := plan.Next(services)
			if r.Since()+gap+d2 < time.Duration(minute+1)*time.Minute && r.Since()+gap+d2 < cfg.Duration-10*time.Second {
				sleep(ctx, gap)
				one(k2, t2, d2)
			}
		}
	}
	recovering.Wait()
	return errors.Join(errs...)
}

// closeDominant waits until billing has charged every fact of the dominant
// tenant, then closes each period they fell in (RunScenario adjusts and
// closes its own three tenants'; the extra tenant's are the soak's to close).
func closeDominant(ctx context.Context, h *chaos.Harness, r *chaos.Run) error {
	if err := waitChargedLogged(ctx, h, r.Ledger.AcceptedIDsOf(Dominant), 10*time.Minute, "billing charges the dominant tenant's facts"); err != nil {
		return err
	}
	for _, p := range r.Ledger.Periods(Dominant)[Dominant] {
		if err := h.ClosePeriod(ctx, Dominant, p); err != nil {
			return fmt.Errorf("close %s %s: %w", Dominant, p, err)
		}
		h.Progress("soak: closed %s %s", Dominant, p)
	}
	return nil
}

// judge fills the problems: the reconciliation's verdict, faults that
// failed or never recovered, and the slope test of every resource series.
func (res *Result) judge(row *chaos.Row) {
	if row != nil {
		res.Problems = append(res.Problems, row.Problems...)
		res.Problems = append(res.Problems, row.NotProven...)
		if !row.Reconciled {
			res.Problems = append(res.Problems, "not reconciled")
		}
	}
	if res.Recon != nil {
		if err := res.Recon.Err(); err != nil {
			res.Problems = append(res.Problems, err.Error())
		}
	}
	for _, f := range res.Faults {
		if f.RecoverErr != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("fault %s on %s at %s: not caught up: %v", f.Kind, f.Target,
				f.Start.Sub(res.LoadStart).Round(time.Second), f.RecoverErr))
		}
	}
	if res.Config.Clock != nil {
		if want := len(closeTimes(res.Config.Duration, res.Config.CloseEvery)); len(res.Closes) < want {
			res.Problems = append(res.Problems, fmt.Sprintf("%d of %d scheduled closes made", len(res.Closes), want))
		}
		for _, c := range res.Closes {
			if c.Err != nil {
				res.Problems = append(res.Problems, fmt.Sprintf("scheduled close at %s (%s): %v", c.At.Round(time.Second), c.Period, c.Err))
			}
		}
	}
	w := window(res.Config.Duration.Seconds())
	published := map[string][]Point{}
	for name, pts := range res.Series {
		if kind, service, ok := cutKind(name); ok && kind == Published {
			published[service] = pts
		}
	}
	w.Settled = Settled(res.Series[Assigned], published, res.Faults, res.LoadStart)
	res.SettledAt = -1
	for _, p := range res.Series[Assigned] {
		if p.V == 1 {
			res.SettledAt = p.T
			break
		}
	}
	for _, name := range slices.Sorted(maps.Keys(res.Series)) {
		kind, _, _ := cutKind(name)
		if _, ok := Slack[kind]; !ok {
			continue
		}
		f := FlatTest(name, res.Series[name], w)
		res.Flat = append(res.Flat, f)
		if f.Grew && Judged(kind) {
			res.Problems = append(res.Problems, "grew: "+f.String())
		}
	}
}

// killSettle is how long after a killed service or broker is started
// again its readings are still not taken as a level: the process (or its
// consumers' reconnections) starting up.
const killSettle = 30 * time.Second

// Published is the kind of the series of each service's events published
// by its relay (outbox_published_total).
const Published = "published"

// Settled returns the slope test's rule for a level's readings: a reading
// at t (seconds after loadStart) counts when the assigned series read 1 at
// t, the series' service had published an event by t if it published any
// in the run (published, by service: its relay's producer makes its topic
// and partition producers, their goroutines and buffers, at its first
// publication, which for invoice is the first scheduled close), and no
// kill of the series' service or of the broker was under way or had ended
// less than killSettle before t.
func Settled(assigned []Point, published map[string][]Point, faults []*Fault, loadStart time.Time) func(name string, t float64) bool {
	first := map[string]float64{}
	for service, pts := range published {
		for _, p := range pts {
			if p.V > 0 {
				first[service] = p.T
				break
			}
		}
	}
	return func(name string, t float64) bool {
		ok := false
		for _, p := range assigned {
			if p.T > t+0.001 {
				break
			}
			ok = p.V == 1
		}
		if !ok {
			return false
		}
		_, service, _ := cutKind(name)
		if at, ok := first[service]; ok && t < at {
			return false
		}
		for _, f := range faults {
			if f.Kind != "broker-kill" && (f.Kind != "service-kill" || f.Target != service) {
				continue
			}
			from, to := f.Start.Sub(loadStart).Seconds(), f.End.Add(killSettle).Sub(loadStart).Seconds()
			if f.End.IsZero() {
				to = math.Inf(1)
			}
			if t >= from && t <= to {
				return false
			}
		}
		return true
	}
}

// judgeChurn fails the run when the webhook churn is not proven: no
// endpoint created, or no delivery to the endpoint kept to the end within
// two minutes of its tenant's periods being invoiced.
func (res *Result) judgeChurn(ctx context.Context) {
	c := &res.Churn
	if c.Created == 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("webhook churn not proven: no endpoint created (%d attempts failed%s)", c.Failures, lastFailure(c.Last)))
		return
	}
	if c.Kept == "" {
		res.Problems = append(res.Problems, "webhook churn not proven: the endpoint kept to the end was not registered")
		return
	}
	if err := chaos.Poll(ctx, 2*time.Minute, "a webhook delivery arrives", func() (bool, string, error) {
		n := c.Deliveries()
		return n > 0, fmt.Sprintf("%d deliveries", n), nil
	}); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("webhook churn not proven: no delivery to %s's endpoint after its periods were invoiced: %v", c.Kept, err))
	}
}

func cutKind(name string) (string, string, bool) {
	for i := range name {
		if name[i] == '/' {
			return name[:i], name[i+1:], true
		}
	}
	return name, "", false
}

func shift(series map[string][]Point, by float64) map[string][]Point {
	for k, pts := range series {
		for i := range pts {
			pts[i].T -= by
		}
		series[k] = pts
	}
	return series
}

// latency reads, per minute of the run, the percentiles of usage ->
// charged in billing. A fact occurred on the services' clock: those of the
// period after a close were stamped with the offset of that close's move
// (the load was paused across it), which is taken off to compare with
// created_at, PostgreSQL's wall clock.
func latency(ctx context.Context, h *chaos.Harness, tenants []string, start time.Time, closes []*Close) ([]MinuteLatency, error) {
	var periods []string
	var offsets []float64
	for _, c := range closes {
		if c.Err == nil && c.Period != "" {
			next, err := events.ParsePeriod(c.Period)
			if err != nil {
				return nil, err
			}
			periods, offsets = append(periods, events.Period(next.AddDate(0, 1, 0))), append(offsets, c.Offset.Seconds())
		}
	}
	rows, err := h.DB["billing"].Query(ctx, `
		WITH c AS (
			SELECT occurred_at - make_interval(secs => coalesce(o.secs, 0)) AS occurred, created_at
			FROM charge LEFT JOIN unnest($3::text[], $4::float8[]) AS o(period, secs) ON o.period = charge.period
			WHERE tenant_id = ANY($1))
		SELECT floor(extract(epoch FROM occurred - $2::timestamptz) / 60)::int, count(*),
		       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM created_at - occurred))
		FROM c GROUP BY 1 ORDER BY 1`, tenants, start, periods, offsets)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []MinuteLatency
	for rows.Next() {
		var m MinuteLatency
		var p []float64
		if err := rows.Scan(&m.Minute, &m.Facts, &p); err != nil {
			return nil, err
		}
		m.P50, m.P95, m.P99 = p[0], p[1], p[2]
		out = append(out, m)
	}
	return out, rows.Err()
}

// heapProfiles reads each service's heap and goroutine profiles when the
// slope test's warm-up window ends and just before the load ends.
func heapProfiles(ctx context.Context, cfg Config, progress func(string, ...any)) {
	if len(cfg.Pprof) == 0 || cfg.Out == "" {
		return
	}
	start := time.Now()
	w := window(cfg.Duration.Seconds())
	for _, at := range []struct {
		label string
		at    time.Duration
	}{{"warm", time.Duration(w.Baseline * float64(time.Second))}, {"end", cfg.Duration - 15*time.Second}} {
		if !sleep(ctx, time.Until(start.Add(at.at))) {
			return
		}
		for name, addr := range cfg.Pprof {
			path := filepath.Join(cfg.Out, fmt.Sprintf("heap-%s-%s.pb.gz", name, at.label))
			if err := fetchTo(ctx, "http://"+addr+"/debug/pprof/heap?gc=1", path); err != nil {
				progress("heap profile of %s (%s): %v", name, at.label, err)
			}
			// The goroutines beside the heap, so a growth in either can be
			// told apart (go tool pprof -base ...-warm ...-end).
			path = filepath.Join(cfg.Out, fmt.Sprintf("goroutine-%s-%s.pb.gz", name, at.label))
			if err := fetchTo(ctx, "http://"+addr+"/debug/pprof/goroutine", path); err != nil {
				progress("goroutine profile of %s (%s): %v", name, at.label, err)
			}
		}
		progress("heap and goroutine profiles (%s) in %s", at.label, cfg.Out)
	}
}

func fetchTo(ctx context.Context, url, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// window is the slope test's window for a run of d seconds: warm-up the
// first tenth (at least a minute), the level read over the next tenth (at
// least 30 s), the line fitted through the last half, both through the
// series' floor in stretches of a thirtieth.
func window(d float64) Window {
	warm := max(60, d/10)
	// Floor: two minutes of an hour (two faults), 30 s (six readings) of a
	// shorter run; at least 5 stretches in the last half.
	return Window{Warm: warm, Baseline: warm + max(30, d/10), Half: d / 2, End: d, Floor: max(30, d/30)}
}
