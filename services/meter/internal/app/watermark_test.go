package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/domain"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var tmpl = servicetest.Template(meter.Spec)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// activate activates a version of t1's api_calls USD series, taking effect
// at eff (zero: as soon as it may); the name only labels the call.
func activate(t *testing.T, a *app.App, _ string, eff time.Time) error {
	t.Helper()
	return a.InTx(t.Context(), func(tx pgx.Tx) error {
		_, err := a.ActivatePrice(t.Context(), tx, app.ActivatePrice{
			TenantID: "t1", Actor: "admin@t1.example",
			Activation: domain.Activation{MeterCode: "api_calls", Currency: "USD", Pricing: pricing.UnitPricing(mustDec("0.5")), EffectiveAt: eff},
		})
		return err
	})
}

// published is meter's outbox, decoded, in append order, without the
// MeterDefined of the meters the prices imply.
func published(t *testing.T, pool *pgxpool.Pool) []*envelope.Decoded {
	t.Helper()
	var out []*envelope.Decoded
	for _, d := range outbox(t, pool) {
		if d.Envelope.EventType != events.TypeMeterDefined {
			out = append(out, d)
		}
	}
	return out
}

// outbox is meter's outbox, decoded, in append order.
func outbox(t *testing.T, pool *pgxpool.Pool) []*envelope.Decoded {
	t.Helper()
	reg := envelope.NewRegistry()
	events.Register(reg)
	rows, err := pool.Query(t.Context(), `SELECT envelope FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*envelope.Decoded
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		d, err := reg.Decode(raw)
		if err != nil {
			t.Fatalf("meter published an envelope its consumers cannot decode: %v", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The watermark is published ahead by the lead, with the activation and
// again before it runs out, and an activation never takes effect inside it.
func TestWatermarkPublishedAheadAndRefreshed(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	t0 := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	a := app.New(app.Deps{Pool: pool, Clock: c.now}, app.Config{ScheduleLead: 5 * time.Second})
	ctx := t.Context()

	if n, err := a.PublishWatermarks(ctx); err != nil || n != 0 {
		t.Fatalf("no series yet: published %d, %v", n, err)
	}
	if err := activate(t, a, "v1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	evs := published(t, pool)
	pa := evs[0].Payload.(events.PriceActivated)
	if !pa.EffectiveAt.Equal(t0) || !pa.KnownThrough.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("v1 takes effect %v known through %v, want %v and now + lead", pa.EffectiveAt, pa.KnownThrough, t0)
	}
	c.set(t0.Add(2 * time.Second)) // 3s left of the 5s lead: not due
	if n, err := a.PublishWatermarks(ctx); err != nil || n != 0 {
		t.Fatalf("watermark not due: published %d, %v", n, err)
	}
	c.set(t0.Add(3 * time.Second)) // 2s left: due
	if n, err := a.PublishWatermarks(ctx); err != nil || n != 1 {
		t.Fatalf("watermark due: published %d, %v", n, err)
	}
	evs = published(t, pool)
	wm, ok := evs[len(evs)-1].Payload.(events.PriceScheduleWatermark)
	if !ok || wm.Version != 1 || !wm.KnownThrough.Equal(t0.Add(8*time.Second)) || wm.MeterCode != "api_calls" || wm.Currency != "USD" {
		t.Fatalf("watermark %+v, want api_calls USD v1 through t0+8s", evs[len(evs)-1].Payload)
	}
	if e := evs[len(evs)-1].Envelope; e.AggregateType != events.AggregatePriceSchedule || e.AggregateVersion != 1 ||
		e.AggregateID != events.PriceScheduleID("api_calls", "USD", wm.KnownThrough) {
		t.Fatalf("watermark on aggregate %s/%s v%d", e.AggregateType, e.AggregateID, e.AggregateVersion)
	}

	// Inside the published schedule: refused, nothing written.
	err := activate(t, a, "inside", t0.Add(6*time.Second))
	if de, ok := err.(*domain.Error); !ok || de.Code != domain.CodeSchedulePublished {
		t.Fatalf("activation inside the published schedule: %v, want %s", err, domain.CodeSchedulePublished)
	}
	// Without effectiveAt: right after the watermark.
	if err := activate(t, a, "v2", time.Time{}); err != nil {
		t.Fatal(err)
	}
	evs = published(t, pool)
	v2 := evs[len(evs)-1].Payload.(events.PriceActivated)
	if v2.Version != 2 || !v2.EffectiveAt.Equal(t0.Add(8*time.Second+time.Microsecond)) {
		t.Fatalf("v2 %+v, want version 2 effective right after t0+8s", v2)
	}
}

// Activations and watermark publishers racing (two publishers, as two meter
// instances would run): every watermark meter published holds, that is no
// version after the one it names takes effect at or before it.
func TestWatermarksHoldUnderConcurrentActivations(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	log := slog.New(slog.DiscardHandler)
	a := app.New(app.Deps{Pool: pool, Logger: log}, app.Config{ScheduleLead: app.NoScheduleLead})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var rounds atomic.Int64
	// Each activation waits for a publisher round to end after it began, so
	// activations and publishers interleave however slow the machine is: a
	// starved publisher cannot let the activations run alone.
	var mu sync.Mutex
	round := make(chan struct{}) // closed when a round ends
	nextRound := func() <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		return round
	}
	stopped := make(chan struct{}) // closed when a publisher fails
	var stopOnce sync.Once
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := a.PublishWatermarks(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("publish: %v", err)
					stopOnce.Do(func() { close(stopped) })
					return
				}
				rounds.Add(1)
				mu.Lock()
				close(round)
				round = make(chan struct{})
				mu.Unlock()
			}
		})
	}
	// Activations go on until 30 versions are accepted (some are refused as
	// inside a watermark, which is the race), or 600 attempts.
	const versions, attempts = 30, 600
	var accepted, tried atomic.Int64
	var act sync.WaitGroup
	for w := range 3 {
		act.Go(func() {
			for i := 0; accepted.Load() < versions && tried.Add(1) <= attempts; i++ {
				var eff time.Time
				if i%3 == 1 {
					eff = time.Now().Add(5 * time.Millisecond) // may fall inside a watermark (or pass while waiting): refused then
				}
				ended := nextRound()
				err := activate(t, a, fmt.Sprintf("w%d-%d", w, i), eff)
				select {
				case <-ended:
				case <-stopped:
					return
				}
				if err == nil {
					accepted.Add(1)
					continue
				}
				if de, ok := err.(*domain.Error); !ok || (de.Code != domain.CodeSchedulePublished &&
					de.Code != domain.CodePriceBackdated && de.Code != domain.CodePriceOutOfOrder) {
					t.Errorf("activate: %v", err)
				}
			}
		})
	}
	act.Wait()
	cancel()
	wg.Wait()

	effective := map[int64]time.Time{}
	type mark struct {
		version int64
		through time.Time
	}
	var marks []mark
	for _, d := range published(t, pool) {
		switch p := d.Payload.(type) {
		case events.PriceActivated:
			effective[p.Version] = p.EffectiveAt
			marks = append(marks, mark{p.Version, p.KnownThrough})
		case events.PriceScheduleWatermark:
			marks = append(marks, mark{p.Version, p.KnownThrough})
		}
	}
	if len(effective) < versions || len(marks) <= len(effective) {
		t.Fatalf("%d versions and %d watermarks (%d publisher rounds, %d activations tried): the race did not happen",
			len(effective), len(marks), rounds.Load(), tried.Load())
	}
	for _, m := range marks {
		for v, eff := range effective {
			if v > m.version && !eff.After(m.through) {
				t.Fatalf("watermark of v%d through %s broken: v%d takes effect at %s", m.version,
					m.through.Format(time.RFC3339Nano), v, eff.Format(time.RFC3339Nano))
			}
		}
	}
	t.Logf("%d versions, %d watermarks checked (%d activations tried)", len(effective), len(marks), tried.Load())
}

func mustDec(s string) decimal.Decimal { return decimal.RequireFromString(s) }
