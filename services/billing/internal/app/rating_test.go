package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

var (
	jan1  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	jan10 = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	jan15 = time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC)
	jan20 = time.Date(2026, 1, 20, 8, 30, 0, 0, time.UTC)
	feb3  = time.Date(2026, 2, 3, 9, 0, 0, 0, time.UTC)
)

func priceV1(tenant string) bt.Price {
	return bt.Price{Tenant: tenant, Meter: "api_calls", Currency: "USD", Version: 1, UnitPrice: "0.0125", EffectiveAt: jan1}
}

func priceV2(tenant string) bt.Price {
	return bt.Price{Tenant: tenant, Meter: "api_calls", Currency: "USD", Version: 2, UnitPrice: "0.02", EffectiveAt: jan15}
}

func usageAt(tenant string, version int64, qty string, at time.Time) bt.Usage {
	return bt.Usage{Tenant: tenant, Meter: "api_calls", Currency: "USD", PriceVersion: version, Quantity: qty, OccurredAt: at}
}

func newService(t *testing.T) (*app.App, *inbox.Inbox, func(...[]byte) []inbox.Decision) {
	t.Helper()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	return svc, ib, func(raws ...[]byte) []inbox.Decision { return bt.Decide(t, pool, ib, raws...) }
}

func outcomes(ds []inbox.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Outcome
		if d.Reason != "" {
			out[i] += ":" + d.Reason
		}
	}
	return out
}

func wantOutcomes(t *testing.T, ds []inbox.Decision, want ...string) {
	t.Helper()
	got := outcomes(ds)
	if len(got) != len(want) {
		t.Fatalf("decisions = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("decisions = %v, want %v", got, want)
		}
	}
}

func TestPriceAtOccurrenceAcrossTwoVersions(t *testing.T) {
	t.Parallel()
	svc, _, decide := newService(t)

	// v1 applies from Jan 1, v2 from Jan 15; billing rates each fact at the
	// version in effect at its occurrence, from its own evidence (the
	// version usage names, stale here, is ignored).
	ds := decide(priceV1("t1").Raw(t), priceV2("t1").Raw(t),
		usageAt("t1", 2, "1000.5", jan10).Raw(t), usageAt("t1", 1, "3", jan20).Raw(t))
	wantOutcomes(t, ds, "applied", "applied", "applied", "applied")

	charges := charges(t, svc, "t1", "2026-01")
	if len(charges) != 2 {
		t.Fatalf("charges = %s", bt.JSON(charges))
	}
	for i, want := range []struct {
		version          int64
		unitPrice, total string
	}{{1, "0.0125", "12.50625"}, {2, "0.02", "0.06"}} {
		c := charges[i]
		if c.PriceVersion != want.version || !c.UnitPrice.Equal(bt.Dec(t, want.unitPrice)) ||
			!c.Amount.Equal(bt.Dec(t, want.total)) || c.Late || c.Period != "2026-01" {
			t.Errorf("charge %d = %s, want price v%d %s amount %s", i, bt.JSON(c), want.version, want.unitPrice, want.total)
		}
	}
	// The amount is exact: 1000.5 x 0.0125 = 12.50625, not rounded.
	if got := charges[0].Amount.String(); got != "12.50625" {
		t.Errorf("amount text = %s, want 12.50625", got)
	}
}

// Billing rates a fact only once it knows the series' schedule through the
// fact's occurrence (decision 0011): usage beyond the known schedule waits,
// a watermark naming a version billing lacks waits for that version, and
// the version's arrival wakes the watermark, which wakes the usage, all in
// one transaction; the usage is then rated at the version in effect, which
// it never named.
func TestUsageDeferredUntilTheScheduleIsKnownThroughIt(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)

	v1 := priceV1("t1")
	v1.KnownThrough = jan15
	usageEnv, usageRaw := usageAt("t1", 0, "10", jan20).Envelope(t)
	ds := bt.Decide(t, pool, ib, v1.Raw(t), usageRaw)
	wantOutcomes(t, ds, "applied", "deferred:missing_fact")
	if want := app.ScheduleKey(events.ScheduleShard("t1"), jan20); ds[1].WaitKey != want {
		t.Fatalf("wait key = %q, want %q", ds[1].WaitKey, want)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`) + bt.Count(t, pool, `SELECT count(*) FROM billing_period`); n != 0 {
		t.Fatalf("a deferred usage left %d charge or period rows", n)
	}
	// The same usage again while it waits: still deferred, not rated. A
	// watermark that does not pass it (known through its very instant)
	// does not wake it: it waits on.
	wantOutcomes(t, bt.Decide(t, pool, ib, usageRaw), "deferred:missing_fact")
	wm := bt.Watermark{Tenant: "t1", Seq: 1, KnownThrough: jan20}
	wantOutcomes(t, bt.Decide(t, pool, ib, wm.Raw(t)), "applied")
	wantOutcomes(t, bt.Decide(t, pool, ib, usageRaw), "deferred:missing_fact")

	// A watermark past the usage that names version 2, which billing lacks:
	// it waits for version 2.
	wm2 := bt.Watermark{Tenant: "t1", Seq: 2, KnownThrough: jan20.Add(30 * time.Minute)}
	ds = bt.Decide(t, pool, ib, wm2.Raw(t))
	wantOutcomes(t, ds, "deferred:missing_fact")
	if want := app.ScheduleSeqKey(events.ScheduleShard("t1"), 2); ds[0].WaitKey != want {
		t.Fatalf("watermark wait key = %q, want %q", ds[0].WaitKey, want)
	}
	// Version 2 arrives (its own watermark below the usage): it wakes the
	// watermark, which wakes the usage.
	v2 := priceV2("t1")
	v2.KnownThrough = jan20.Add(-time.Hour)
	ds = bt.Decide(t, pool, ib, v2.Raw(t))
	wantOutcomes(t, ds, "applied", "applied", "applied")
	if !ds[2].Woken || ds[2].EventID != usageEnv.EventID {
		t.Fatalf("third decision = %+v, want the woken usage", ds[2])
	}
	// And once more: a duplicate, no second charge.
	wantOutcomes(t, bt.Decide(t, pool, ib, usageRaw), "duplicate")

	charges := charges(t, svc, "t1", "2026-01")
	if len(charges) != 1 || charges[0].PriceVersion != 2 || !charges[0].Amount.Equal(bt.Dec(t, "0.2")) ||
		charges[0].UsageEventID != usageEnv.EventID {
		t.Fatalf("charges = %s", bt.JSON(charges))
	}
	rated := bt.OfType[events.ChargeRated](bt.Outbox(t, pool))
	if len(rated) != 1 || rated[0].PriceVersion != 2 {
		t.Fatalf("ChargeRated events = %s, want one at version 2", bt.JSON(rated))
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred`); n != 0 {
		t.Fatalf("%d events still deferred", n)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM schedule_seq`); n != 0 {
		t.Fatalf("%d activations kept once the shard's are contiguous, want none (bounded by those out of order)", n)
	}
}

// A rise of the known schedule wakes the usage of the seconds it makes
// wholly known, not of the second it ends in: a schedule renewed many times
// a second would otherwise wake the same waiting facts each time, to defer
// most of them again. A fact of that second is rated by the rise that
// completes it (or by the sweep).
func TestARiseWakesTheSecondsItCompletes(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)

	v1 := priceV1("t1")
	v1.KnownThrough = jan20
	fact, factRaw := usageAt("t1", 0, "10", jan20.Add(200*time.Millisecond)).Envelope(t)
	wantOutcomes(t, bt.Decide(t, pool, ib, v1.Raw(t), factRaw), "applied", "deferred:missing_fact")
	// Known through 08:30:00.5: the fact (at .2) is known, its second is not
	// wholly: not woken.
	half := bt.Watermark{Tenant: "t1", Seq: 1, KnownThrough: jan20.Add(500 * time.Millisecond)}
	wantOutcomes(t, bt.Decide(t, pool, ib, half.Raw(t)), "applied")
	// Through 08:30:01: the second is complete; the fact is woken and rated.
	whole := bt.Watermark{Tenant: "t1", Seq: 1, KnownThrough: jan20.Add(time.Second)}
	ds := bt.Decide(t, pool, ib, whole.Raw(t))
	wantOutcomes(t, ds, "applied", "applied")
	if !ds[1].Woken || ds[1].EventID != fact.EventID {
		t.Fatalf("second decision = %+v, want the woken fact", ds[1])
	}
	if c := charges(t, svc, "t1", "2026-01"); len(c) != 1 || c[0].PriceVersion != 1 {
		t.Fatalf("charges = %s, want one at version 1", bt.JSON(c))
	}
}

// The known schedule only rises: a late, lower watermark changes nothing.
func TestKnownScheduleNeverFalls(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	v1 := priceV1("t1")
	v1.KnownThrough = jan20
	low := bt.Watermark{Tenant: "t1", Seq: 1, KnownThrough: jan15}
	wantOutcomes(t, bt.Decide(t, pool, ib, v1.Raw(t), low.Raw(t), usageAt("t1", 0, "2", jan20.Add(-time.Second)).Raw(t)),
		"applied", "applied", "applied")
	if n := bt.Count(t, pool, `SELECT count(*) FROM schedule_shard WHERE known_through = $1`, jan20); n != 1 {
		t.Fatal("a lower watermark lowered the known schedule")
	}
}

func TestSameUsageDeliveredEightTimesConcurrently(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t))
	usageRaw := usageAt("t1", 1, "7", jan10).Raw(t)

	const deliveries = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make(chan []inbox.Decision, deliveries)
	errs := make(chan error, deliveries)
	for range deliveries {
		wg.Go(func() {
			<-start
			ds, err := bt.TryDecide(t.Context(), pool, ib, usageRaw)
			if err != nil {
				errs <- err
				return
			}
			results <- ds
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	close(results)
	for err := range errs {
		t.Fatalf("delivery failed: %v", err)
	}
	applied := 0
	for ds := range results {
		if ds[0].Outcome == inbox.OutcomeApplied {
			applied++
		} else if ds[0].Outcome != inbox.OutcomeDuplicate {
			t.Errorf("decision %+v", ds[0])
		}
	}
	if applied != 1 {
		t.Fatalf("applied %d times, want 1", applied)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
	if n := len(bt.OfType[events.ChargeRated](bt.Outbox(t, pool))); n != 1 {
		t.Fatalf("ChargeRated = %d, want 1", n)
	}
	// Rating writes no period row: a period without one is open.
	if n := bt.Count(t, pool, `SELECT count(*) FROM billing_period`); n != 0 {
		t.Fatalf("rating wrote %d period rows", n)
	}
}

func TestLateUsageGoesToTheNextOpenPeriod(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)

	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "4", jan10).Raw(t))
	closePeriod(t, svc, "t1", "2026-01", "k-jan")
	before := bt.Outbox(t, pool)
	janClose := bt.OfType[events.BillingPeriodClosed](before)

	// Usage of January after January closed: rated into February, late.
	lateEnv, lateRaw := usageAt("t1", 1, "2", jan10).Envelope(t)
	wantOutcomes(t, bt.Decide(t, pool, ib, lateRaw), "applied")
	feb := charges(t, svc, "t1", "2026-02")
	if len(feb) != 1 || !feb[0].Late || feb[0].Period != "2026-02" || feb[0].UsageEventID != lateEnv.EventID ||
		!feb[0].OccurredAt.Equal(jan10) {
		t.Fatalf("february charges = %s", bt.JSON(feb))
	}
	if jan := charges(t, svc, "t1", "2026-01"); len(jan) != 1 {
		t.Fatalf("the closed period changed: %s", bt.JSON(jan))
	}
	// The close counted January's one charge, not the late one.
	if len(janClose) != 1 || janClose[0].Charges != 1 {
		t.Fatalf("january close = %s", bt.JSON(janClose))
	}
	checkClose(t, pool, "t1", janClose[0])
	after := bt.Outbox(t, pool)[len(before):]
	if len(after) != 1 {
		t.Fatalf("published %d events, want 1 ChargeRated", len(after))
	}
	cr := after[0].Payload.(events.ChargeRated)
	if e := after[0].Envelope; !cr.Late || cr.Period != "2026-02" || e.AggregateType != events.AggregateCharge ||
		e.AggregateID != feb[0].ChargeID.String() || e.AggregateVersion != 1 || e.EventID != feb[0].EventID {
		t.Fatalf("late ChargeRated = %s on %+v", bt.JSON(cr), e)
	}

	// With February closed too, January usage goes to March; usage of
	// February as well.
	closePeriod(t, svc, "t1", "2026-02", "k-feb")
	febClose := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))[1]
	if febClose.Period != "2026-02" || febClose.Charges != 1 {
		t.Fatalf("february close = %s", bt.JSON(febClose))
	}
	checkClose(t, pool, "t1", febClose)
	wantOutcomes(t, bt.Decide(t, pool, ib, usageAt("t1", 1, "1", jan10).Raw(t), usageAt("t1", 1, "1", feb3).Raw(t)),
		"applied", "applied")
	mar := charges(t, svc, "t1", "2026-03")
	if len(mar) != 2 || !mar[0].Late || !mar[1].Late || mar[0].Period != "2026-03" || mar[1].Period != "2026-03" {
		t.Fatalf("march charges = %s", bt.JSON(mar))
	}
	// Another tenant's January is untouched by t1's close.
	bt.Decide(t, pool, ib, priceV1("t2").Raw(t), usageAt("t2", 1, "1", jan10).Raw(t))
	if c := charges(t, svc, "t2", "2026-01"); len(c) != 1 || c[0].Late {
		t.Fatalf("t2 january = %s", bt.JSON(c))
	}
}

// Batches of different partitions rate the same tenants' periods at once:
// rating holds each period's lock shared and writes nothing another charge
// writes, so two transactions that bring the same two periods in opposite
// orders neither wait for each other nor deadlock. Each batch rates its
// first event, then waits, inside its transaction, until the other has
// rated its own first event too.
func TestConcurrentBatchesOverTheSameTenantsDoNotWait(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("a").Raw(t), priceV1("b").Raw(t))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	batch := func(first, second string, started chan<- struct{}, other <-chan struct{}) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		msg := func(tenant string) []inbox.Message {
			return []inbox.Message{{Raw: usageAt(tenant, 1, "1", jan10).Raw(t), Topic: events.TopicUsage}}
		}
		if _, err := ib.Decide(ctx, tx, msg(first)); err != nil {
			return err
		}
		close(started)
		select {
		case <-other:
		case <-ctx.Done():
			return fmt.Errorf("the other batch never rated its first event while this one was open: %w", ctx.Err())
		}
		if _, err := ib.Decide(ctx, tx, msg(second)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	aStarted, bStarted := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 2)
	go func() { errs <- batch("a", "b", aStarted, bStarted) }()
	go func() {
		<-aStarted
		errs <- batch("b", "a", bStarted, aStarted)
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("batch failed: %v", err)
		}
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 4 {
		t.Fatalf("charges = %d, want 4", n)
	}
}

// Every transaction of a full pool rates into a period nobody rated into
// yet: rating needs no connection besides its transaction's (a period
// without a row is open), so a consumer whose batches hold every connection
// of the pool still makes progress.
func TestRatingNeedsNoSecondConnection(t *testing.T) {
	t.Parallel()
	pool := bt.NewPoolConns(t, 3)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	n := int(pool.Config().MaxConns)
	txs := make([]pgx.Tx, n)
	for i := range txs {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		txs[i] = tx
	}
	errs := make(chan error, n)
	for i, tx := range txs {
		go func() {
			raw := usageAt("t1", 1, "1", jan10.AddDate(0, i, 0)).Raw(t)
			if _, err := ib.Decide(ctx, tx, []inbox.Message{{Raw: raw, Topic: events.TopicUsage}}); err != nil {
				errs <- err
				return
			}
			errs <- tx.Commit(ctx)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("rating in a full pool: %v", err)
		}
	}
	if c := bt.Count(t, pool, `SELECT count(DISTINCT period) FROM charge`); c != n {
		t.Fatalf("charges in %d periods, want %d", c, n)
	}
}

func TestPriceEvidenceIsReplicatedOnce(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	raw := priceV1("t1").Raw(t)
	wantOutcomes(t, bt.Decide(t, pool, ib, raw, raw), "applied", "duplicate")
	// Another event claiming the same price version is a duplicate too.
	wantOutcomes(t, bt.Decide(t, pool, ib, priceV1("t1").Raw(t)), "duplicate:version_already_applied")
	if n := bt.Count(t, pool, `SELECT count(*) FROM price_evidence`); n != 1 {
		t.Fatalf("evidence rows = %d", n)
	}
	var price string
	if err := pool.QueryRow(t.Context(), `SELECT unit_price::text FROM price_evidence`).Scan(&price); err != nil || price != "0.0125" {
		t.Fatalf("unit price = %q, %v", price, err)
	}
}

func TestEventsOnTheWrongAggregateAreQuarantined(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	at := jan10
	price, err := envelope.New(envelope.Meta{
		EventType: events.TypePriceActivated, SchemaVersion: 1, TenantID: "t1", AggregateType: events.AggregatePrice,
		AggregateID: "other.USD", AggregateVersion: 1, OccurredAt: at, Producer: "meter",
	}, events.PriceActivated{PriceID: uuid.Must(uuid.NewV7()), MeterCode: "api_calls", Currency: "USD",
		UnitPrice: bt.Dec(t, "1"), EffectiveAt: at, Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	usageID := uuid.Must(uuid.NewV7())
	usage, err := envelope.New(envelope.Meta{
		EventType: events.TypeUsageAccepted, SchemaVersion: 1, TenantID: "t1", AggregateType: events.AggregateUsage,
		AggregateID: uuid.NewString(), AggregateVersion: 1, OccurredAt: at, Producer: "usage",
	}, events.UsageAccepted{UsageID: usageID, SourceSystem: "s", SourceEventID: "e", MeterCode: "api_calls",
		Quantity: bt.Dec(t, "1"), OccurredAt: at, Currency: "USD", PriceVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	var raws [][]byte
	for _, e := range []envelope.Envelope{price, usage} {
		raw, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, raw)
	}
	wantOutcomes(t, bt.Decide(t, pool, ib, append(raws, priceV1("t1").Raw(t))...),
		"quarantined:aggregate_mismatch", "quarantined:aggregate_mismatch", "applied")
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`) + bt.Count(t, pool, `SELECT count(*) FROM outbox_event WHERE topic <> $1`, events.TopicOps); n != 0 {
		t.Fatalf("quarantined events wrote %d rows", n)
	}
	// What they write is the announcement of each quarantine (ops).
	if n := bt.Count(t, pool, `SELECT count(*) FROM outbox_event WHERE topic = $1`, events.TopicOps); n != 2 {
		t.Fatalf("%d quarantines announced on %s, want 2", n, events.TopicOps)
	}
}

// One batch of usage is rated in one statement with the outcomes of rating
// each alone: usage of a closed period goes late to the next open one, usage
// of a tenant whose schedule shard is not known is deferred alone, and the
// ChargeRated events are published in the batch's order.
func TestOneBatchRatesEachUsageAsAlone(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "4", jan10).Raw(t))
	closePeriod(t, svc, "t1", "2026-01", "k-jan")
	before := len(bt.Outbox(t, pool))

	var raws [][]byte
	var usage []uuid.UUID
	unknown := bt.Usage{Tenant: "t2", Meter: "sms", Currency: "USD", Quantity: "3", OccurredAt: feb3} // t2's shard is not t1's
	for _, u := range []bt.Usage{usageAt("t1", 1, "1", jan10), usageAt("t1", 1, "2", feb3), unknown,
		usageAt("t1", 1, "4", feb3), usageAt("t1", 1, "5", jan20)} {
		e, r := u.Envelope(t)
		raws, usage = append(raws, r), append(usage, e.EventID)
	}
	wantOutcomes(t, bt.Decide(t, pool, ib, raws...), "applied", "applied", "deferred:missing_fact", "applied", "applied")
	feb := charges(t, svc, "t1", "2026-02")
	late := 0
	for _, c := range feb {
		if c.Late {
			late++
		}
	}
	if len(feb) != 4 || late != 2 {
		t.Fatalf("february charges = %s", bt.JSON(feb))
	}
	if jan := charges(t, svc, "t1", "2026-01"); len(jan) != 1 {
		t.Fatalf("the closed period changed: %s", bt.JSON(jan))
	}
	var got []uuid.UUID
	for _, d := range bt.Outbox(t, pool)[before:] {
		got = append(got, d.Payload.(events.ChargeRated).UsageEventID)
	}
	want := []uuid.UUID{usage[0], usage[1], usage[3], usage[4]}
	if !slices.Equal(got, want) {
		t.Fatalf("ChargeRated published for usage %v, want %v", got, want)
	}
}

// A PriceActivated billing quarantines (here: a schema version its release
// cannot read) holds back what depends on it, visibly and without guessing:
// the watermark naming that version and the usage after the known schedule
// wait (deferred, in the recovery counts), and once a release that reads it
// redrives it, the version, the watermark and the usage are applied in one
// transaction, the usage at that version.
func TestQuarantinedPriceActivatedHoldsRatingBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)

	v1 := priceV1("t1")
	v1.KnownThrough = jan15
	v2 := priceV2("t1")
	v2.KnownThrough = jan20.Add(10 * time.Minute)
	_, v2Raw := v2.Envelope(t, 2) // schema version 2: this release cannot read it
	wm := bt.Watermark{Tenant: "t1", Seq: 2, KnownThrough: jan20.Add(30 * time.Minute)}
	usageEnv, usageRaw := usageAt("t1", 0, "10", jan20).Envelope(t)
	wantOutcomes(t, bt.Decide(t, pool, ib, v1.Raw(t), v2Raw, wm.Raw(t), usageRaw),
		"applied", "quarantined:unsupported_schema", "deferred:missing_fact", "deferred:missing_fact")

	stats, err := inbox.ReadStats(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Deferred != 2 || stats.Quarantined != 1 {
		t.Fatalf("recovery counts %+v, want 2 deferred (watermark, usage) and 1 quarantined", stats)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 0 {
		t.Fatalf("%d charges while the price was quarantined", n)
	}

	// The next release reads schema version 2; the operator redrives.
	next := bt.NewRelease(t, svc, func(reg *envelope.Registry) {
		envelope.Register[events.PriceActivated](reg, events.TypePriceActivated, 2)
	})
	var id int64
	if err := pool.QueryRow(ctx, `SELECT id FROM inbox_quarantine`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var ds []inbox.Decision
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ds, err = next.RedriveQuarantined(ctx, tx, id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, ds, "applied", "applied", "applied")
	charges := charges(t, svc, "t1", "2026-01")
	if len(charges) != 1 || charges[0].PriceVersion != 2 || charges[0].UsageEventID != usageEnv.EventID {
		t.Fatalf("charges = %s, want the usage at version 2", bt.JSON(charges))
	}
	if stats, err = inbox.ReadStats(ctx, pool); err != nil || stats.Deferred != 0 || stats.Quarantined != 0 {
		t.Fatalf("recovery counts after the redrive %+v (%v), want none", stats, err)
	}
}

// Two batches raise the schedules of two series in opposite orders, each
// holding its first series' row while it reaches for the other's: the
// second raise of each is deferred instead of waiting (waiting would
// deadlock, and the database would abort one batch), both batches commit,
// and the sweep applies the deferred watermarks.
func TestBatchesRaisingSchedulesInOppositeOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	pa, pb := priceV1("a"), priceV1("b")
	pa.KnownThrough, pb.KnownThrough = jan10, jan10
	bt.Decide(t, pool, ib, pa.Raw(t), pb.Raw(t))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	watermark := func(tenant string, through time.Time) []inbox.Message {
		wm := bt.Watermark{Tenant: tenant, Seq: 1, KnownThrough: through}
		return []inbox.Message{{Raw: wm.Raw(t), Topic: events.TopicMeter}}
	}
	// Each batch raises its first series, waits until the other has raised
	// its own, reaches for the other's series, and commits only once the
	// other has reached too (or failed): so both reach while both rows are
	// held.
	type step struct{ raised, reached chan struct{} }
	batch := func(first, second string, through time.Time, me, other step) (_ []inbox.Decision, err error) {
		reachedOnce := sync.OnceFunc(func() { close(me.reached) })
		defer reachedOnce()
		tx, err := pool.Begin(ctx)
		if err != nil {
			close(me.raised)
			return nil, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		ds, err := ib.Decide(ctx, tx, watermark(first, through))
		close(me.raised)
		if err != nil {
			return nil, err
		}
		select {
		case <-other.raised:
		case <-ctx.Done():
			return nil, fmt.Errorf("the other batch never raised its first schedule: %w", ctx.Err())
		}
		more, err := ib.Decide(ctx, tx, watermark(second, through))
		reachedOnce()
		if err != nil {
			return nil, err
		}
		select {
		case <-other.reached:
		case <-ctx.Done():
			return nil, fmt.Errorf("the other batch never reached for its second schedule: %w", ctx.Err())
		}
		return append(ds, more...), tx.Commit(ctx)
	}
	type result struct {
		ds  []inbox.Decision
		err error
	}
	a := step{make(chan struct{}), make(chan struct{})}
	b := step{make(chan struct{}), make(chan struct{})}
	results := make(chan result, 2)
	go func() {
		ds, err := batch("a", "b", jan15, a, b)
		results <- result{ds, err}
	}()
	go func() {
		<-a.raised
		ds, err := batch("b", "a", jan20, b, a)
		results <- result{ds, err}
	}()
	deferred := 0
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatalf("batch failed: %v", r.err)
		}
		if got := outcomes(r.ds); len(got) != 2 || got[0] != "applied" {
			t.Fatalf("decisions = %v, want the first applied", got)
		}
		if r.ds[1].Outcome == "deferred" {
			deferred++
		}
	}
	if deferred != 2 {
		t.Fatalf("%d second raises deferred, want both (each row was held by the other batch)", deferred)
	}
	if n, err := ib.Sweep(ctx, pool, 100); err != nil || n != 2 {
		var left []string
		rows, _ := pool.Query(ctx, `SELECT coalesce(wait_key,'') || ' ' || next_attempt::text FROM inbox_deferred`)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			left = append(left, s)
		}
		t.Fatalf("sweep applied %d (err %v), want 2; deferred: %v", n, err, left)
	}
	for _, tenant := range []string{"a", "b"} {
		shard := events.ScheduleShard(tenant)
		if n := bt.Count(t, pool, `SELECT count(*) FROM schedule_shard WHERE shard = $1 AND known_through = $2`, shard, jan20); n != 1 {
			var got time.Time
			_ = pool.QueryRow(ctx, `SELECT known_through FROM schedule_shard WHERE shard = $1`, shard).Scan(&got)
			t.Fatalf("tenant %s: the schedule is known through %s after the sweep, want %s", tenant, got, jan20)
		}
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred`); n != 0 {
		t.Fatalf("%d events still deferred", n)
	}
}
