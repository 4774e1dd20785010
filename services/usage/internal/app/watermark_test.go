package app_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/domain"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
)

// TestWatermarkHoldsUnderConcurrentAcceptance races accepting batches
// against two watermark publishers and a relay stand-in that acknowledges
// outbox rows at random moments (deletes their pending entries, as the relay
// does after the broker's ack, and notes when), on real PostgreSQL. Every
// watermark appended must hold: every UsageAccepted whose fact was accepted
// before its through was acknowledged before the watermark was written (so
// the relay sends it first to every partition), and no fact accepted before
// a through commits after that watermark.
func TestWatermarkHoldsUnderConcurrentAcceptance(t *testing.T) {
	e := usagetest.New(t)
	ctx := t.Context()
	base := time.Now().Add(-time.Hour).UTC()
	e.ApplyPrices(t, usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: 1, UnitPrice: "0.5", EffectiveAt: base})
	a := app.New(app.Deps{Pool: e.Pool}, app.Config{})

	const partitions = 3
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	progressed := make(chan struct{}, 1) // a batch accepted or a cut published
	progress := func() {
		select {
		case progressed <- struct{}{}:
		default:
		}
	}
	// Four accepting clients.
	var accepted atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				batch := make([]domain.Usage, 1+n%5)
				for i := range batch {
					batch[i] = domain.Usage{SourceSystem: "wm", SourceEventID: fmt.Sprintf("w%d-%d-%d", w, n, i),
						MeterCode: "api", Quantity: decimal.NewFromInt(1), OccurredAt: base.Add(time.Minute)}
				}
				if _, err := a.Accept(ctx, "t1", "", batch); err != nil {
					errs <- err
					return
				}
				accepted.Add(int64(len(batch)))
				progress()
			}
		}()
	}
	// A relay stand-in: acknowledges whatever is pending, now and then. The
	// outbox keeps no send time (a sent row is one without a pending entry),
	// so the stand-in notes when it acknowledged each row: the time of its
	// deletion's transaction, read back below. Only this goroutine writes
	// them, and they are read once it is done.
	var ackedIDs []uuid.UUID
	var ackedAts []time.Time
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			rows, err := e.Pool.Query(ctx, `DELETE FROM outbox_pending RETURNING event_id, now()`)
			if err == nil {
				var id uuid.UUID
				var at time.Time
				_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
					ackedIDs, ackedAts = append(ackedIDs, id), append(ackedAts, at)
					return nil
				})
			}
			if err != nil {
				errs <- err
				return
			}
			// Deliberately spaced: acknowledgements land between the
			// acceptances and cuts, not in a hot loop that starves them.
			time.Sleep(3 * time.Millisecond)
		}
	}()
	// Two publishers (two usage instances).
	var published atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				through, err := a.PublishWatermarks(ctx, partitions)
				if err != nil {
					errs <- err
					return
				}
				if !through.IsZero() {
					published.Add(1)
					progress()
				}
			}
		}()
	}
	// The race runs until it is big enough to prove something, not for a
	// fixed time: a loaded machine accepts less per second.
	const wantFacts, wantCuts = 1500, 40
	timeout := time.After(2 * time.Minute)
race:
	for accepted.Load() < wantFacts || published.Load() < wantCuts {
		select {
		case <-progressed:
		case err := <-errs:
			errs <- err // reported below, once every goroutine has stopped
			break race
		case <-timeout:
			stop.Store(true)
			wg.Wait()
			t.Fatalf("after 2 minutes %d facts accepted and %d cuts published, want %d and %d",
				accepted.Load(), published.Load(), wantFacts, wantCuts)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d facts accepted, %d cuts published", accepted.Load(), published.Load())
	if accepted.Load() == 0 || published.Load() < 2 {
		t.Fatalf("%d facts accepted, %d cuts published: the race did not run", accepted.Load(), published.Load())
	}

	// Every watermark: per partition, one per cut; the facts accepted before
	// its through all acknowledged before it was written.
	rows, err := e.Pool.Query(ctx, `SELECT envelope, created_at FROM outbox_event WHERE event_type = $1 ORDER BY id`,
		events.TypeUsageAcceptedThrough)
	if err != nil {
		t.Fatal(err)
	}
	reg := envelope.NewRegistry()
	events.Register(reg)
	type mark struct {
		through, written time.Time
	}
	var marks []mark
	perCut := map[time.Time]map[int32]bool{}
	for rows.Next() {
		var raw []byte
		var written time.Time
		if err := rows.Scan(&raw, &written); err != nil {
			t.Fatal(err)
		}
		d, err := reg.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		p := d.Payload.(events.UsageAcceptedThrough)
		if p.Partitions != partitions {
			t.Fatalf("watermark of %d partitions, want %d", p.Partitions, partitions)
		}
		if perCut[p.Through] == nil {
			perCut[p.Through] = map[int32]bool{}
			marks = append(marks, mark{p.Through, written})
		}
		if perCut[p.Through][p.Partition] {
			t.Fatalf("two watermarks of partition %d through %s", p.Partition, p.Through)
		}
		perCut[p.Through][p.Partition] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for through, ps := range perCut {
		if len(ps) != partitions {
			t.Fatalf("cut %s has watermarks of %d partitions, want %d", through, len(ps), partitions)
		}
	}
	for i := 1; i < len(marks); i++ {
		if !marks[i].through.After(marks[i-1].through) {
			t.Fatalf("watermark through %s after %s: not rising", marks[i].through, marks[i-1].through)
		}
	}
	checked := 0
	for _, m := range marks {
		var late int
		err := e.Pool.QueryRow(ctx, `
			SELECT count(*) FROM usage_fact f JOIN outbox_event o ON o.event_id = f.event_id
			LEFT JOIN unnest($3::uuid[], $4::timestamptz[]) AS a(event_id, acked_at) ON a.event_id = o.event_id
			WHERE f.accepted_at < $1 AND (a.acked_at IS NULL OR a.acked_at > $2)`,
			m.through, m.written, ackedIDs, ackedAts).Scan(&late)
		if err != nil {
			t.Fatal(err)
		}
		if late > 0 {
			t.Fatalf("watermark through %s written at %s: %d facts accepted before it acknowledged after it", m.through, m.written, late)
		}
		var covered int
		if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_fact WHERE accepted_at < $1`, m.through).Scan(&covered); err != nil {
			t.Fatal(err)
		}
		checked += covered
	}
	t.Logf("%d facts accepted, %d cuts of %d partitions; %d (fact, watermark) pairs held", accepted.Load(), len(marks), partitions, checked)
}

// TestWatermarkWaitsForTheBroker: a cut whose facts are not acknowledged
// publishes nothing (an idle service still advances: a cut with no facts
// publishes at once); a dead-lettered fact holds the watermark back.
func TestWatermarkWaitsForTheBroker(t *testing.T) {
	e := usagetest.New(t)
	ctx := t.Context()
	base := time.Now().Add(-time.Hour).UTC()
	e.ApplyPrices(t, usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: 1, UnitPrice: "0.5", EffectiveAt: base})
	a := app.New(app.Deps{Pool: e.Pool}, app.Config{})

	if _, err := a.PublishWatermarks(ctx, 0); !errors.Is(err, app.ErrNoPartitions) {
		t.Fatalf("no partitions: %v, want ErrNoPartitions", err)
	}
	idle, err := a.PublishWatermarks(ctx, 2)
	if err != nil || idle.IsZero() {
		t.Fatalf("idle service: watermark %v, %v; want one at once", idle, err)
	}
	if _, err := a.Accept(ctx, "t1", "", []domain.Usage{{SourceSystem: "wm", SourceEventID: "1", MeterCode: "api",
		Quantity: decimal.NewFromInt(1), OccurredAt: base}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if through, err := a.PublishWatermarks(ctx, 2); err != nil || !through.IsZero() {
			t.Fatalf("fact not acknowledged: watermark %v, %v; want none", through, err)
		}
	}
	// Dead-lettered (dead_at set, its pending entry gone, as the relay's
	// failed send leaves it): still held back.
	if _, err := e.Pool.Exec(ctx, `
		WITH d AS (
			UPDATE outbox_event SET dead_at = now() WHERE event_type = 'UsageAccepted' RETURNING shard, id
		)
		DELETE FROM outbox_pending p USING d WHERE p.shard = d.shard AND p.id = d.id`); err != nil {
		t.Fatal(err)
	}
	if through, err := a.PublishWatermarks(ctx, 2); err != nil || !through.IsZero() {
		t.Fatalf("fact dead-lettered: watermark %v, %v; want none", through, err)
	}
	// Sent after all: neither dead nor pending.
	if _, err := e.Pool.Exec(ctx, `
		WITH s AS (
			UPDATE outbox_event SET dead_at = NULL WHERE event_type = 'UsageAccepted' RETURNING shard, id
		)
		DELETE FROM outbox_pending p USING s WHERE p.shard = s.shard AND p.id = s.id`); err != nil {
		t.Fatal(err)
	}
	through, err := a.PublishWatermarks(ctx, 2)
	if err != nil || !through.After(idle) {
		t.Fatalf("fact acknowledged: watermark %v, %v; want one after %v", through, err, idle)
	}
	var acceptedAt time.Time
	if err := e.Pool.QueryRow(ctx, `SELECT accepted_at FROM usage_fact`).Scan(&acceptedAt); err != nil {
		t.Fatal(err)
	}
	if !acceptedAt.Before(through) || acceptedAt.Before(idle) {
		t.Fatalf("fact accepted at %v: want in [%v, %v)", acceptedAt, idle, through)
	}
}
