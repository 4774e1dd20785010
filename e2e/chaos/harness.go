package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/outbox"
)

// Harness is what the scenarios share on one running stack: the HTTP
// client, the decision counter, the suite's Kafka view, and a connection
// pool on each service's database (direct, past its proxy: the suite's
// reads are not cut when a service's path is).
type Harness struct {
	Stack     *stack.Stack
	Client    *Client
	Decisions *Decisions
	Kafka     *Kafka
	DB        map[string]*pgxpool.Pool
	Progress  func(format string, args ...any)

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// NewHarness connects to a running stack and starts scraping decisions.
func NewHarness(ctx context.Context, s *stack.Stack, progress func(string, ...any)) (*Harness, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	h := &Harness{Stack: s, DB: map[string]*pgxpool.Pool{}, Progress: progress}
	h.Client = NewClient(h.Targets)
	h.Decisions = NewDecisions(h.Instances)
	h.Kafka = NewKafka(s.KafkaBrokers())
	for _, name := range s.Services() {
		cfg, err := pgxpool.ParseConfig(s.DatabaseURL(name))
		if err != nil {
			h.Close()
			return nil, err
		}
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("connect to %s's database: %w", name, err)
		}
		h.DB[name] = pool
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.stop = cancel
	h.wg.Go(func() { h.Decisions.Run(runCtx, time.Second) })
	return h, nil
}

// Close stops the scraping and closes the connections.
func (h *Harness) Close() {
	if h.stop != nil {
		h.stop()
	}
	h.wg.Wait()
	for _, p := range h.DB {
		p.Close()
	}
	if h.Kafka != nil {
		h.Kafka.Close()
	}
}

// Targets returns the base URLs of service's running instances.
func (h *Harness) Targets(service string) []string {
	var out []string
	for i := range h.Stack.Instances(service) {
		if h.Stack.PID(service, i) != 0 {
			out = append(out, h.Stack.URL(service, i))
		}
	}
	return out
}

// Instances lists every service instance with its current process id.
func (h *Harness) Instances() []Instance {
	var out []Instance
	for _, name := range h.Stack.Services() {
		for i := range h.Stack.Instances(name) {
			out = append(out, Instance{Service: name, Index: i, URL: h.Stack.URL(name, i), PID: h.Stack.PID(name, i)})
		}
	}
	return out
}

// Kill flushes the instance's decision count, then kills it with SIGKILL.
func (h *Harness) Kill(ctx context.Context, service string, index int) error {
	h.Decisions.Flush(ctx, service, index)
	return h.Stack.Kill(service, index)
}

// Backlog is one service's unfinished work.
type Backlog struct {
	OutboxPending, DeadLetters, Deferred, Quarantined, Lag int64
}

func (b Backlog) zero() bool { return b == Backlog{} }

func (b Backlog) String() string {
	var parts []string
	add := func(n int64, what string) {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(b.OutboxPending, "outbox pending")
	add(b.DeadLetters, "dead letters")
	add(b.Lag, "unconsumed")
	add(b.Deferred, "deferred")
	add(b.Quarantined, "quarantined")
	return strings.Join(parts, ", ")
}

// Backlogs reads every service's outbox and inbox backlog from its
// database and its consumer group's lag from the broker.
func (h *Harness) Backlogs(ctx context.Context) (map[string]Backlog, error) {
	lag, err := h.Kafka.Lag(ctx)
	if err != nil {
		return nil, fmt.Errorf("consumer lag: %w", err)
	}
	out := map[string]Backlog{}
	for name, pool := range h.DB {
		ob, err := outbox.ReadStats(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		ib, err := inbox.ReadStats(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = Backlog{OutboxPending: ob.Pending, DeadLetters: ob.DeadLetters, Deferred: ib.Deferred,
			Quarantined: ib.Quarantined, Lag: lag[name]}
	}
	return out, nil
}

// ErrNotQuiet is returned by WaitQuiet when the deadline passes.
var ErrNotQuiet = errors.New("the system did not come to rest")

// WaitQuiet waits until the whole system is at rest: every outbox
// drained and no dead letter, no event deferred or quarantined, and every
// consumer group's offsets at the end of its topics, in two readings a
// second apart. It reports progress every five seconds and gives up after
// deadline, returning the last backlog in the error.
func (h *Harness) WaitQuiet(ctx context.Context, deadline time.Duration) (time.Duration, error) {
	began := time.Now()
	lastReport := began
	calm := 0
	var last string
	for {
		b, err := h.Backlogs(ctx)
		busy := []string{}
		if err != nil {
			busy = append(busy, err.Error())
		}
		for _, name := range slices.Sorted(maps.Keys(b)) {
			if !b[name].zero() {
				busy = append(busy, name+": "+b[name].String())
			}
		}
		if len(busy) == 0 {
			calm++
			if calm == 2 {
				return time.Since(began), nil
			}
		} else {
			calm = 0
			last = strings.Join(busy, "; ")
		}
		if time.Since(began) > deadline {
			return time.Since(began), fmt.Errorf("%w after %s: %s", ErrNotQuiet, deadline, last)
		}
		if len(busy) > 0 && time.Since(lastReport) >= 5*time.Second {
			h.Progress("waiting for rest (%s): %s", time.Since(began).Round(time.Second), last)
			lastReport = time.Now()
		}
		if !sleepCtx(ctx, time.Second) {
			return time.Since(began), ctx.Err()
		}
	}
}

// CaughtUp watches, after a fault ended at end, for the system to have
// carried everything the load had accepted by then all the way through:
// a charge in billing, its copy in invoice (invoice_charge) and the charge in
// query's projection for every one of those usage facts. It returns the
// time from end until then, or an error after deadline.
func (h *Harness) CaughtUp(ctx context.Context, ledger *Ledger, end time.Time, deadline time.Duration) (time.Duration, error) {
	// Answers in flight at the end are counted with it.
	ids := ledger.AcceptedBefore(end)
	if len(ids) == 0 {
		return 0, nil
	}
	stop := time.Now().Add(deadline)
	var status string
	for {
		done, s, err := h.caughtUp(ctx, ids)
		if err == nil && done {
			return time.Since(end), nil
		}
		if err != nil {
			s = err.Error()
		}
		status = s
		if time.Now().After(stop) {
			return time.Since(end), fmt.Errorf("not caught up %s after the fault: %s", deadline, status)
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return time.Since(end), ctx.Err()
		}
	}
}

func (h *Harness) caughtUp(ctx context.Context, usageEvents []string) (bool, string, error) {
	var charges []string
	err := h.DB["billing"].QueryRow(ctx,
		`SELECT coalesce(array_agg(event_id::text), '{}') FROM charge WHERE usage_event_id = ANY($1::uuid[])`,
		usageEvents).Scan(&charges)
	if err != nil {
		return false, "", err
	}
	if len(charges) < len(usageEvents) {
		return false, fmt.Sprintf("%d/%d charged", len(charges), len(usageEvents)), nil
	}
	var invoiced, projected int
	if err := h.DB["invoice"].QueryRow(ctx,
		`SELECT count(*) FROM invoice_charge WHERE origin_event_id = ANY($1::uuid[])`, charges).Scan(&invoiced); err != nil {
		return false, "", err
	}
	if err := h.DB["query"].QueryRow(ctx,
		`SELECT count(*) FROM projected_event WHERE event_id = ANY($1::uuid[])`, charges).Scan(&projected); err != nil {
		return false, "", err
	}
	return invoiced >= len(charges) && projected >= len(charges),
		fmt.Sprintf("%d charged, %d in invoice, %d projected of %d", len(charges), invoiced, projected, len(usageEvents)), nil
}

// Adjustments posted per currency by AdjustAndClose: a credit before the
// close (an adjustment line) and a debit after it (a correction note of the
// issued invoice).
var (
	adjustmentAmounts = map[string]decimal.Decimal{
		"USD": decimal.RequireFromString("-0.25"),
		"KRW": decimal.RequireFromString("-3"),
	}
	afterCloseAmounts = map[string]decimal.Decimal{
		"USD": decimal.RequireFromString("0.10"),
		"KRW": decimal.RequireFromString("2"),
	}
)

// AdjustAndClose posts, for each tenant, one adjustment on a charge of
// each of its currencies, closes every period its usage fell in, so
// invoices are issued, then posts one more adjustment per currency and
// period, after the close: a correction note. Each command is retried
// through outages with one Idempotency-Key.
func (h *Harness) AdjustAndClose(ctx context.Context, ledger *Ledger, tenants []string) error {
	periods := ledger.Periods(tenants...)
	for _, tenant := range tenants {
		tenantPeriods := periods[tenant]
		for _, period := range tenantPeriods {
			if err := h.adjustEachCurrency(ctx, ledger, tenant, period, adjustmentAmounts, "chaos-adj"); err != nil {
				return err
			}
		}
		for _, period := range tenantPeriods {
			if err := h.ClosePeriod(ctx, tenant, period); err != nil {
				return err
			}
		}
		for _, period := range tenantPeriods {
			if err := h.adjustEachCurrency(ctx, ledger, tenant, period, afterCloseAmounts, "chaos-adj-after-close"); err != nil {
				return err
			}
		}
	}
	return nil
}

// adjustEachCurrency posts an adjustment of amounts[currency] on the first
// charge of each currency of the tenant's period. A credit is cut to half
// the period's charges of the currency (in whole minor units), so that it
// never exceeds what it credits (credit_exceeds_charges), and skipped when
// that is nothing.
func (h *Harness) adjustEachCurrency(ctx context.Context, ledger *Ledger, tenant, period string, amounts map[string]decimal.Decimal, keyPrefix string) error {
	charges, err := h.periodCharges(ctx, tenant, period)
	if err != nil {
		return err
	}
	charged := map[string]decimal.Decimal{}
	for _, c := range charges {
		if c.Amount != nil { // the chaos suite prices by unit: every charge has its amount
			charged[c.Currency] = charged[c.Currency].Add(*c.Amount)
		}
	}
	done := map[string]bool{}
	for _, c := range charges {
		amount, ok := amounts[c.Currency]
		if !ok || done[c.Currency] {
			continue
		}
		done[c.Currency] = true
		if amount.IsNegative() {
			scale, err := money.Currency(c.Currency)
			if err != nil {
				return err
			}
			amount = decimal.Max(amount, charged[c.Currency].Div(decimal.NewFromInt(2)).Truncate(scale).Neg())
			if !amount.IsNegative() {
				h.Progress("%s %s: %s charges too small for a credit; none posted", tenant, period, c.Currency)
				continue
			}
		}
		body := billingapi.AdjustmentRequest{CorrectionOf: c.ChargeId.String(), Amount: amount, Currency: c.Currency, Reason: "chaos suite adjustment"}
		resp, err := h.command(ctx, "billing", "/v1/tenants/"+tenant+"/adjustments", tenant, body,
			fmt.Sprintf("%s-%s-%s-%s", keyPrefix, tenant, period, c.Currency), http.StatusCreated)
		if err != nil {
			return err
		}
		var adj billingapi.Adjustment
		if err := resp.Decode(&adj); err != nil {
			return err
		}
		ledger.mu.Lock()
		ledger.Adjustments = append(ledger.Adjustments, AdjustmentRecord{Tenant: tenant, AdjustmentID: adj.AdjustmentId.String(),
			EventID: adj.EventId.String(), Period: adj.Period, Currency: c.Currency, Amount: amount, CorrectionOf: c.ChargeId.String()})
		ledger.mu.Unlock()
	}
	return nil
}

// periodCharges lists a tenant's charges of period, page by page (the
// list's largest page, following next until it is absent).
func (h *Harness) periodCharges(ctx context.Context, tenant, period string) ([]billingapi.Charge, error) {
	var all []billingapi.Charge
	q := url.Values{"period": {period}, "limit": {"1000"}}
	for {
		var out billingapi.ChargeList
		if err := h.Client.Get(ctx, "billing", "/v1/tenants/"+tenant+"/charges?"+q.Encode(), tenant, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Charges...)
		if out.Next == nil || *out.Next == "" {
			return all, nil
		}
		q.Set("cursor", *out.Next)
	}
}

// command sends an idempotent command until it gets want, retrying
// transport errors and 503s with the same key for up to two minutes.
func (h *Harness) command(ctx context.Context, service, path, tenant string, body any, key string, want int) (*Response, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := h.Client.Do(ctx, service, http.MethodPost, path, tenant, body, map[string]string{"Idempotency-Key": key})
		if err == nil && resp.Status == want {
			return resp, nil
		}
		if err == nil && resp.Status != http.StatusServiceUnavailable {
			return nil, fmt.Errorf("POST %s %s: %s", service, path, resp)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("POST %s %s: gave up after two minutes: %v %v", service, path, err, resp)
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// Work is a reading of how far the system has got: the outbox rows
// pending over every service, and the charges billing holds.
type Work struct {
	OutboxPending int64
	Charges       int64
}

// Work reads it from the databases.
func (h *Harness) Work(ctx context.Context) (Work, error) {
	var w Work
	for _, pool := range h.DB {
		ob, err := outbox.ReadStats(ctx, pool)
		if err != nil {
			return w, err
		}
		w.OutboxPending += ob.Pending
	}
	err := h.DB["billing"].QueryRow(ctx, `SELECT count(*) FROM charge`).Scan(&w.Charges)
	return w, err
}

// WaitApplied returns as soon as the instance's inbox has committed
// another batch (its count of APPLIED decisions rose), or after timeout
// (false). Killing the instance right then leaves that batch's offsets
// uncommitted in Kafka with high probability, since the consumer commits
// its marked offsets once a second: a crash between commit and offset.
func (h *Harness) WaitApplied(ctx context.Context, service string, index int, timeout time.Duration) bool {
	url := h.Stack.URL(service, index)
	var base float64 = -1
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		c, err := h.Decisions.read(ctx, url)
		if err == nil {
			n := float64(c.Outcome(service, "applied"))
			if base >= 0 && n > base {
				return true
			}
			base = n
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return false
		}
	}
	return false
}

// Sharing describes how each service's instances share the work: the
// outbox shards each live relay holds, and the members of its consumer
// group.
func (h *Harness) Sharing(ctx context.Context) (string, error) {
	members, err := h.Kafka.Members(ctx)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, name := range h.Stack.Services() {
		rows, err := h.DB[name].Query(ctx, `
			SELECT count(*) FROM outbox_shard WHERE owner IS NOT NULL AND lease_until > now() GROUP BY owner ORDER BY 1 DESC`)
		if err != nil {
			return "", err
		}
		held, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return "", err
		}
		var hs []string
		for _, n := range held {
			hs = append(hs, fmt.Sprint(n))
		}
		parts = append(parts, fmt.Sprintf("%s: shards %s, %d group members", name, strings.Join(hs, "/"), members[name]))
	}
	return strings.Join(parts, "; "), nil
}
