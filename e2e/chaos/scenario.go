package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenario is one fault (or set of faults) injected while a load runs.
type Scenario struct {
	// Key names the scenario's tenants and source event ids ("s1").
	Key   string
	Title string
	Load  LoadConfig
	// Setup runs after the initial prices are active, before the load.
	Setup func(ctx context.Context, r *Run) error
	// Faults runs while the load runs; it injects faults through r.Fault.
	Faults func(ctx context.Context, r *Run) error
	// Verify runs after the reconciliation, for the scenario's own proof
	// (r.Fail records what is missing).
	Verify func(ctx context.Context, r *Run) error
	// NeedDuplicates: a run without a real duplicate delivery is "not
	// proven" and fails.
	NeedDuplicates bool
	// Reconcile replaces Reconcile for the end check when set (the soak's
	// ReconcileStream, whose memory does not grow with the run).
	Reconcile func(ctx context.Context, db map[string]*pgxpool.Pool, tenants []string, ledger *Ledger) (*Reconciliation, error)
}

// Run is one scenario's run.
type Run struct {
	H       *Harness
	Key     string
	Tenants []string
	// Extra tenants the scenario touches besides the load's (probes),
	// reconciled with them.
	Extra  []string
	Ledger *Ledger
	Load   *Load
	// LoadStart is when the load began.
	LoadStart time.Time

	mu        sync.Mutex
	faults    []*FaultRecord
	notes     []string
	problems  []string
	notProven []string
	watchers  sync.WaitGroup

	// Filled at the end.
	Decisions Counts
	Log       LogDuplicates
	Recon     *Reconciliation
}

// FaultRecord is one injected fault and how long the system took to
// carry everything accepted before its end through (CaughtUp).
type FaultRecord struct {
	Name       string
	Start, End time.Time
	Recovery   time.Duration
	RecoverErr error
}

// Note records a line for the report.
func (r *Run) Note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.H.Progress("%s: %s", r.Key, fmt.Sprintf(format, args...))
}

// Fail records a failed check of the scenario.
func (r *Run) Fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
	r.H.Progress("%s: FAILED: %s", r.Key, fmt.Sprintf(format, args...))
}

// NotProven records a claim the run could not demonstrate (it fails the
// run).
func (r *Run) NotProven(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notProven = append(r.notProven, fmt.Sprintf(format, args...))
	r.H.Progress("%s: NOT PROVEN: %s", r.Key, fmt.Sprintf(format, args...))
}

// Since returns the time since the load began, for scheduling faults.
func (r *Run) Since() time.Duration { return time.Since(r.LoadStart) }

// At sleeps until d after the load began.
func (r *Run) At(ctx context.Context, d time.Duration) bool {
	return sleepCtx(ctx, time.Until(r.LoadStart.Add(d)))
}

// Fault injects one fault: fn injects it, waits and removes it, returning
// when the system is left to recover. The time from its end until
// everything accepted by then has gone through is measured in the
// background.
func (r *Run) Fault(ctx context.Context, name string, fn func() error) error {
	rec := &FaultRecord{Name: name, Start: time.Now()}
	r.H.Progress("%s: fault %q at %s", r.Key, name, r.Since().Round(100*time.Millisecond))
	err := fn()
	rec.End = time.Now()
	r.mu.Lock()
	r.faults = append(r.faults, rec)
	r.mu.Unlock()
	if err != nil {
		r.Fail("fault %q: %v", name, err)
		return err
	}
	r.H.Progress("%s: fault %q over after %s", r.Key, name, rec.End.Sub(rec.Start).Round(100*time.Millisecond))
	r.watchers.Go(func() {
		d, err := r.H.CaughtUp(ctx, r.Ledger, rec.End, 6*time.Minute)
		r.mu.Lock()
		rec.Recovery, rec.RecoverErr = d, err
		r.mu.Unlock()
		if err == nil {
			r.H.Progress("%s: caught up %s after %q", r.Key, d.Round(100*time.Millisecond), name)
		}
	})
	return nil
}

// Faults returns the faults injected so far.
func (r *Run) Faults() []FaultRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]FaultRecord, len(r.faults))
	for i, f := range r.faults {
		out[i] = *f
	}
	return out
}

// Tenants names a scenario's tenants.
func Tenants(key string) []string {
	return []string{key + "-acme", key + "-globex", key + "-initech"}
}

// RunScenario runs sc on the harness and returns its report row; the
// error is what stopped it early (the row still says what was seen).
func (h *Harness) RunScenario(ctx context.Context, sc Scenario) (*Row, *Run, error) {
	began := time.Now()
	r := &Run{H: h, Key: sc.Key, Tenants: Tenants(sc.Key), Ledger: NewLedger()}
	row := &Row{Scenario: sc.Key + " " + sc.Title}
	err := h.runScenario(ctx, sc, r)
	if err != nil {
		r.Fail("%v", err)
	}
	h.fillRow(row, r, sc, began)
	return row, r, err
}

// runScenario drives sc's load and faults, lets the system come to rest,
// closes, reconciles and verifies; an error stops it early.
func (h *Harness) runScenario(ctx context.Context, sc Scenario, r *Run) error {
	// Baselines: decisions and the topics' logs so far.
	h.Decisions.ScrapeAll(ctx)
	before := h.Decisions.Total()
	if _, err := h.Kafka.ScanLog(ctx); err != nil {
		return fmt.Errorf("scan the topics before the run: %w", err)
	}
	if err := h.drive(ctx, sc, r); err != nil {
		return err
	}
	h.Progress("%s: load done (%s); waiting for the system to come to rest", sc.Key, r.Since().Round(time.Second))
	if err := h.settle(ctx, r, before); err != nil {
		return err
	}
	if err := h.reconcile(ctx, r, sc.Reconcile); err != nil {
		return err
	}
	if sc.Verify != nil {
		if err := sc.Verify(ctx, r); err != nil {
			r.Fail("%v", err)
		}
	}
	for _, u := range r.Ledger.Unexpected() {
		r.Fail("answer out of contract: %s", u)
	}
	if sc.NeedDuplicates && r.Decisions.Outcome("", "duplicate") == 0 {
		r.NotProven("no real duplicate was delivered: nothing shows that duplicates are absorbed")
	}
	return nil
}

// drive activates the initial prices, runs sc's setup, then its load and
// its faults side by side until both are done.
func (h *Harness) drive(ctx context.Context, sc Scenario, r *Run) error {
	cfg := sc.Load
	cfg.Name, cfg.Tenants = sc.Key, r.Tenants
	if cfg.Progress == nil {
		cfg.Progress = h.Progress
	}
	r.Load = NewLoad(h.Client, r.Ledger, cfg)
	if err := r.Load.ActivateInitialPrices(ctx); err != nil {
		return fmt.Errorf("initial prices: %w", err)
	}
	if sc.Setup != nil {
		if err := sc.Setup(ctx, r); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	h.Progress("%s: load of %d facts over %s for %s", sc.Key, cfg.Facts, cfg.Duration, strings.Join(r.Tenants, ", "))
	r.LoadStart = time.Now()
	var wg sync.WaitGroup
	var loadErr, faultErr error
	wg.Go(func() { loadErr = r.Load.Run(ctx) })
	if sc.Faults != nil {
		wg.Go(func() { faultErr = sc.Faults(ctx, r) })
	}
	wg.Wait()
	return errors.Join(loadErr, faultErr)
}

// settle waits for the system to come to rest, adjusts and closes the
// tenants' periods, waits again, then records the decisions taken since
// before and the topics' logs.
func (h *Harness) settle(ctx context.Context, r *Run, before Counts) error {
	if _, err := h.WaitQuiet(ctx, 5*time.Minute); err != nil {
		return err
	}
	if err := h.AdjustAndClose(ctx, r.Ledger, r.Tenants); err != nil {
		return fmt.Errorf("adjust and close: %w", err)
	}
	if _, err := h.WaitQuiet(ctx, 3*time.Minute); err != nil {
		return fmt.Errorf("after the close: %w", err)
	}
	r.watchers.Wait()
	h.Decisions.ScrapeAll(ctx)
	r.Decisions = h.Decisions.Total().Sub(before)
	log, err := h.Kafka.ScanLog(ctx)
	if err != nil {
		return fmt.Errorf("scan the topics: %w", err)
	}
	r.Log = log
	return nil
}

// reconcile reconciles the run's tenants against its ledger and notes what
// was reconciled.
func (h *Harness) reconcile(ctx context.Context, r *Run, reconcile func(context.Context, map[string]*pgxpool.Pool, []string, *Ledger) (*Reconciliation, error)) error {
	if reconcile == nil {
		reconcile = Reconcile
	}
	rec, err := reconcile(ctx, h.DB, append(slices.Clone(r.Tenants), r.Extra...), r.Ledger)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	r.Recon = rec
	var versions []string
	for v := int64(1); v <= 10; v++ {
		if n := rec.ByVersion[v]; n > 0 {
			versions = append(versions, fmt.Sprintf("v%d: %d", v, n))
		}
	}
	r.Note("reconciled %d usage facts (priced by %s), %d charges, %d adjustments, %d invoice charges in %d lines on %d invoices, %d projected events",
		rec.Facts, strings.Join(versions, ", "), rec.Charges, rec.Adjustments, rec.InvoiceCharges, rec.InvoiceLines, rec.Invoices, rec.Projected)
	return nil
}

func (h *Harness) fillRow(row *Row, r *Run, sc Scenario, began time.Time) {
	st := r.Ledger.Snapshot()
	row.Facts = st.Accepted
	row.Requests = st.Requests
	row.DupSubmitted = st.DupSubmissions + st.InBatchRepeats
	for _, f := range r.Faults() {
		row.Faults++
		if f.RecoverErr != nil {
			row.RecoveryNote = "not caught up: " + f.RecoverErr.Error()
		}
		row.Recovery = max(row.Recovery, f.Recovery)
	}
	if r.Decisions != nil {
		row.DupAbsorbed = r.Decisions.Outcome("", "duplicate")
		row.Deferred = r.Decisions.Outcome("", "deferred")
		row.Quarantined = r.Decisions.Outcome("", "quarantined")
	}
	row.DupPublished = r.Log.Total()
	if r.Recon != nil {
		row.Lost, row.Duplicated, row.Mismatched = len(r.Recon.Lost), len(r.Recon.Duplicated), len(r.Recon.Mismatch)
		row.Reconciled = true
	}
	row.Took = time.Since(began)
	r.mu.Lock()
	row.Notes = slices.Clone(r.notes)
	row.Problems = slices.Clone(r.problems)
	row.NotProven = slices.Clone(r.notProven)
	r.mu.Unlock()
	switch {
	case len(row.Problems) > 0 || !row.Reconciled || row.Lost+row.Duplicated+row.Mismatched > 0:
		row.Verdict = "FAIL"
	case len(row.NotProven) > 0:
		row.Verdict = "NOT PROVEN"
	default:
		row.Verdict = "pass"
	}
}
