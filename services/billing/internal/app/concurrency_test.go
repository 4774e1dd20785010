package app_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// closeAt closes period once a share of all the batches has committed,
// while the other batches are being decided.
type closeAt struct {
	period string
	after  float64 // share of the batches committed before it starts
}

// ratingRace is a run of several consumers deciding batches of one tenant's
// usage at once, as the runner does (one transaction per batch, decided
// through the inbox), while periods close in the middle of it.
type ratingRace struct {
	workers, batches, size int
	occurred               []time.Time // usage occurs at these times, round robin
	closes                 []closeAt
	adjust                 bool // post adjustments of rated charges all along
}

type raceResult struct {
	pool       *pgxpool.Pool
	usage      []uuid.UUID // the UsageAccepted event ids
	occurredIn map[uuid.UUID]string
}

func (r ratingRace) run(t *testing.T) raceResult {
	t.Helper()
	pool := bt.NewPoolConns(t, int32(r.workers+len(r.closes)+3))
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), priceV2("t1").Raw(t), krwPrice("t1").Raw(t))
	res := raceResult{pool: pool, occurredIn: map[uuid.UUID]string{}}

	// Every batch is built before the race.
	work := make([][][][]byte, r.workers)
	n := 0
	for w := range work {
		work[w] = make([][][]byte, r.batches)
		for b := range work[w] {
			for range r.size {
				at := r.occurred[n%len(r.occurred)].Add(time.Duration(n) * time.Second)
				u := usageAt("t1", 1, fmt.Sprintf("%d.%03d", 1+n%9, n%1000), at)
				switch n % 3 {
				case 1:
					u = bt.Usage{Tenant: "t1", Meter: "sms", Currency: "KRW", PriceVersion: 1, Quantity: fmt.Sprint(1 + n%5), OccurredAt: at}
				case 2:
					if at.After(jan15) {
						u.PriceVersion = 2
					}
				}
				env, raw := u.Envelope(t)
				res.usage = append(res.usage, env.EventID)
				res.occurredIn[env.EventID] = events.Period(at)
				work[w][b] = append(work[w][b], raw)
				n++
			}
		}
	}
	total := r.workers * r.batches

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var committed atomic.Int64
	start := make([]chan struct{}, len(r.closes))
	done := make([]chan struct{}, len(r.closes))
	allClosed := make(chan struct{})
	errs := make(chan error, r.workers+len(r.closes)+1)
	var wg sync.WaitGroup
	for i, c := range r.closes {
		start[i], done[i] = make(chan struct{}), make(chan struct{})
		wg.Go(func() {
			defer close(done[i])
			select {
			case <-start[i]:
			case <-ctx.Done():
				errs <- fmt.Errorf("close of %s never started", c.period)
				return
			}
			if i > 0 { // periods close in order: after the one before
				<-done[i-1]
			}
			if _, err := tryClose(ctx, svc, "t1", c.period, "close-"+c.period); err != nil {
				errs <- fmt.Errorf("close %s: %w", c.period, err)
			}
		})
	}
	go func() {
		for _, d := range done {
			<-d
		}
		close(allClosed)
	}()
	workersDone := make(chan struct{})
	var workers sync.WaitGroup
	for w := range r.workers {
		workers.Go(func() {
			for b, raws := range work[w] {
				if b == len(work[w])-1 {
					<-allClosed // some usage surely comes after every close
				}
				ds, err := bt.TryDecide(ctx, pool, ib, raws...)
				if err != nil {
					errs <- fmt.Errorf("worker %d batch %d: %w", w, b, err)
					return
				}
				for _, d := range ds {
					if d.Outcome != inbox.OutcomeApplied {
						errs <- fmt.Errorf("worker %d batch %d: decision %+v", w, b, d)
						return
					}
				}
				c := committed.Add(1)
				for i, cl := range r.closes {
					if c == int64(float64(total)*cl.after) {
						close(start[i])
					}
				}
			}
		})
	}
	go func() { workers.Wait(); close(workersDone) }()
	if r.adjust {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-workersDone:
					return
				default:
				}
				var id uuid.UUID
				var currency string
				err := pool.QueryRow(ctx, `SELECT charge_id, currency FROM charge ORDER BY random() LIMIT 1`).Scan(&id, &currency)
				if err != nil {
					time.Sleep(time.Millisecond) // nothing rated yet
					continue
				}
				a, err := domain.ParseAdjustment(domain.AdjustmentRequest{CorrectionOf: id.String(),
					Amount: []string{"1", "-1", "2"}[rand.IntN(3)], Currency: currency, Reason: "race"})
				if err == nil {
					key := fmt.Sprintf("adj-%d", i)
					_, err = postAdjustment(ctx, svc, app.Request{TenantID: "t1", Actor: "racer@test"}, key, a)
				}
				if de := (*domain.Error)(nil); errors.As(err, &de) && de.Code == "credit_exceeds_charges" {
					err = nil // a credit larger than what is left is refused, as it should be
				}
				if err != nil {
					errs <- fmt.Errorf("adjustment %d: %w", i, err)
					return
				}
			}
		})
	}
	workers.Wait()
	wg.Wait()
	close(errs)
	for err := range errs {
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Errorf("deadlock: %v", err)
			continue
		}
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return res
}

// check asserts what must hold after a race: every usage event has exactly
// one charge and one ChargeRated; a charge is late exactly when it is not in
// the period of its occurrence, and then in the earliest period that was
// open; each close published once, counting exactly the charges (and the
// adjustments posted before it) that the charge table holds for its period.
// It returns the number of charges per period.
func (res raceResult) check(t *testing.T, closed ...string) map[string]int {
	t.Helper()
	pool := res.pool
	ctx := t.Context()
	if n := bt.Count(t, pool, `SELECT count(*) FROM unnest($1::uuid[]) AS u(id)
		WHERE (SELECT count(*) FROM charge c WHERE c.usage_event_id = u.id) <> 1`, res.usage); n != 0 {
		t.Fatalf("%d usage events without exactly one charge", n)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != len(res.usage) {
		t.Fatalf("charges = %d, want %d", n, len(res.usage))
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM outbox_event WHERE event_type = 'ChargeRated'`); n != len(res.usage) {
		t.Fatalf("ChargeRated = %d, want %d", n, len(res.usage))
	}
	rows, err := pool.Query(ctx, `SELECT usage_event_id, period, late FROM charge`)
	if err != nil {
		t.Fatal(err)
	}
	perPeriod := map[string]int{}
	for rows.Next() {
		var id uuid.UUID
		var period string
		var late bool
		if err := rows.Scan(&id, &period, &late); err != nil {
			t.Fatal(err)
		}
		perPeriod[period]++
		occurred := res.occurredIn[id]
		if late != (period != occurred) || period < occurred {
			t.Fatalf("usage of %s rated into %s, late %v", occurred, period, late)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	closes := map[string]events.BillingPeriodClosed{}
	for _, c := range bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool)) {
		if _, dup := closes[c.Period]; dup {
			t.Fatalf("%s closed twice", c.Period)
		}
		closes[c.Period] = c
	}
	if len(closes) != len(closed) {
		t.Fatalf("closes = %s, want %v", bt.JSON(closes), closed)
	}
	for _, p := range closed {
		c, ok := closes[p]
		if !ok {
			t.Fatalf("%s was not closed: %s", p, bt.JSON(closes))
		}
		if c.Charges != int64(perPeriod[p]) {
			t.Fatalf("close of %s counted %d charges, the period holds %d", p, c.Charges, perPeriod[p])
		}
		checkClose(t, pool, "t1", c)
	}
	for _, n := range []string{"inbox_deferred", "inbox_quarantine"} {
		if c := bt.Count(t, pool, `SELECT count(*) FROM `+n); c != 0 {
			t.Fatalf("%s holds %d events", n, c)
		}
	}
	return perPeriod
}

// Several consumers rate the same tenant's January at once, and January
// closes in the middle: the close waits for the rating transactions in
// flight and counts exactly what they rated; everything decided after it is
// late in February. No deadlock.
func TestRatingRacingACloseCountsExactlyThePeriodsCharges(t *testing.T) {
	t.Parallel()
	race := ratingRace{workers: 6, batches: 8, size: 25, occurred: []time.Time{jan10, jan20},
		closes: []closeAt{{"2026-01", 1.0 / 3}}}
	res := race.run(t)
	per := res.check(t, "2026-01")
	if per["2026-01"] == 0 || per["2026-02"] == 0 || per["2026-01"]+per["2026-02"] != len(res.usage) {
		t.Fatalf("charges per period = %v of %d", per, len(res.usage))
	}
	if n := bt.Count(t, res.pool, `SELECT count(*) FROM charge WHERE period = '2026-02' AND NOT late`); n != 0 {
		t.Fatalf("%d charges in February are not late", n)
	}
	t.Logf("charges per period: %v", per)
}

// The same with usage of two periods in every batch, both periods closing
// at different moments, and adjustments posted all along: transactions that
// hold one period's lock while they wait for another's, and closes of both,
// neither deadlock nor miscount; an adjustment the close did not count says
// it came after the close.
func TestRatingRacingClosesOfTwoPeriodsAndAdjustments(t *testing.T) {
	t.Parallel()
	race := ratingRace{workers: 6, batches: 8, size: 25, occurred: []time.Time{jan10, feb3, jan20},
		closes: []closeAt{{"2026-01", 0.25}, {"2026-02", 0.5}}, adjust: true}
	res := race.run(t)
	per := res.check(t, "2026-01", "2026-02")
	if per["2026-01"] == 0 || per["2026-02"] == 0 || per["2026-03"] == 0 {
		t.Fatalf("charges per period = %v", per)
	}
	if n := bt.Count(t, res.pool, `SELECT count(*) FROM adjustment`); n == 0 {
		t.Fatal("no adjustment was posted during the race")
	}
	if n := bt.Count(t, res.pool, `SELECT count(*) FROM adjustment a
		WHERE a.after_close <> EXISTS (SELECT 1 FROM outbox_event o
			WHERE o.event_type = 'AdjustmentPosted' AND o.event_id = a.event_id
			  AND (convert_from(o.envelope, 'UTF8')::jsonb->'payload'->>'afterClose')::boolean)`); n != 0 {
		t.Fatalf("%d adjustments whose row and event disagree on afterClose", n)
	}
	t.Logf("charges per period: %v; adjustments %d, after close %d", per,
		bt.Count(t, res.pool, `SELECT count(*) FROM adjustment`),
		bt.Count(t, res.pool, `SELECT count(*) FROM adjustment WHERE after_close`))
}
