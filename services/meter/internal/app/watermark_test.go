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

// allShards is how many schedule shards meter publishes: the tenants' and
// the plans' (events.PlanShard).
const allShards = events.ScheduleShards + 1

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// activate activates a version of t1's api_calls USD series, taking effect
// at eff (zero: as soon as it may); the name only labels the call.
func activate(t *testing.T, a *app.App, name string, eff time.Time) error {
	t.Helper()
	return activateSeries(t, a, "t1", "api_calls", name, eff)
}

// activateSeries activates a version of a tenant's meter's USD series.
func activateSeries(t *testing.T, a *app.App, tenant, meterCode, _ string, eff time.Time) error {
	t.Helper()
	return a.InTx(t.Context(), func(tx pgx.Tx) error {
		_, err := a.ActivatePrice(t.Context(), tx, app.ActivatePrice{
			TenantID: tenant, Actor: "admin@" + tenant + ".example",
			Activation: domain.Activation{MeterCode: meterCode, Currency: "USD", Pricing: pricing.UnitPricing(mustDec("0.5")), EffectiveAt: eff},
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

// The watermark is published per schedule shard, ahead by the lead, with
// an activation and again before it runs out, for every shard whether or
// not it has series; an activation never takes effect inside it.
func TestWatermarkPublishedAheadAndRefreshed(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	t0 := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	a := app.New(app.Deps{Pool: pool, Clock: c.now}, app.Config{ScheduleLead: 5 * time.Second})
	ctx := t.Context()
	shard := events.ScheduleShard("t1")

	if err := activate(t, a, "v1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	evs := published(t, pool)
	pa := evs[0].Payload.(events.PriceActivated)
	if !pa.EffectiveAt.Equal(t0) || !pa.KnownThrough.Equal(t0.Add(5*time.Second)) || pa.ScheduleSeq != 1 {
		t.Fatalf("v1 takes effect %v known through %v as activation %d of its shard, want %v, now + lead and 1",
			pa.EffectiveAt, pa.KnownThrough, pa.ScheduleSeq, t0)
	}
	// Every other shard (the plans' too) is published now, t1's (known
	// through t0+5s with v1) is not due.
	if n, err := a.PublishWatermarks(ctx); err != nil || n != allShards-1 {
		t.Fatalf("first round: published %d, %v; want every shard but t1's (%d)", n, err, allShards-1)
	}
	c.set(t0.Add(2 * time.Second)) // 3s left of the 5s lead: not due
	if n, err := a.PublishWatermarks(ctx); err != nil || n != 0 {
		t.Fatalf("watermark not due: published %d, %v", n, err)
	}
	c.set(t0.Add(3 * time.Second)) // 2s left: due, for every shard
	if n, err := a.PublishWatermarks(ctx); err != nil || n != allShards {
		t.Fatalf("watermarks due: published %d, %v; want %d", n, err, allShards)
	}
	var wm events.PriceScheduleWatermark
	var env envelope.Envelope
	for _, d := range published(t, pool) {
		if p, ok := d.Payload.(events.PriceScheduleWatermark); ok && p.Shard == shard {
			wm, env = p, d.Envelope
		}
	}
	if wm.Seq != 1 || wm.Shards != events.ScheduleShards || !wm.KnownThrough.Equal(t0.Add(8*time.Second)) {
		t.Fatalf("t1's shard's watermark %+v, want activation 1 of %d shards through t0+8s", wm, events.ScheduleShards)
	}
	if env.AggregateType != events.AggregatePriceSchedule || env.AggregateVersion != 1 || env.TenantID != events.ScheduleTenant ||
		env.AggregateID != events.PriceScheduleID(shard, wm.KnownThrough) {
		t.Fatalf("watermark on aggregate %s/%s/%s v%d", env.TenantID, env.AggregateType, env.AggregateID, env.AggregateVersion)
	}

	// Inside the published schedule: refused, nothing written, for a new
	// series of the shard as for an existing one.
	before := len(outbox(t, pool))
	err := activate(t, a, "inside", t0.Add(6*time.Second))
	if de, ok := err.(*domain.Error); !ok || de.Code != domain.CodeSchedulePublished {
		t.Fatalf("activation inside the published schedule: %v, want %s", err, domain.CodeSchedulePublished)
	}
	err = activateSeries(t, a, "t1", "tokens", "new series inside", t0.Add(6*time.Second))
	if de, ok := err.(*domain.Error); !ok || de.Code != domain.CodeSchedulePublished {
		t.Fatalf("a new series' first version inside the published schedule: %v, want %s", err, domain.CodeSchedulePublished)
	}
	if after := len(outbox(t, pool)); after != before {
		t.Fatalf("refused activations wrote %d events", after-before)
	}
	// Without effectiveAt: right after the watermark, the shard's next activation.
	if err := activate(t, a, "v2", time.Time{}); err != nil {
		t.Fatal(err)
	}
	evs = published(t, pool)
	v2 := evs[len(evs)-1].Payload.(events.PriceActivated)
	if v2.Version != 2 || v2.ScheduleSeq != 2 || !v2.EffectiveAt.Equal(t0.Add(8*time.Second+time.Microsecond)) {
		t.Fatalf("v2 %+v, want version 2, activation 2 of the shard, effective right after t0+8s", v2)
	}
}

// What one round publishes does not grow with the series: one watermark
// per shard at 1, 1,000 and 100,000 series (decision 0019).
func TestWatermarksPerRoundIndependentOfSeries(t *testing.T) {
	for _, series := range []int{1, 1000, 100000} {
		t.Run(fmt.Sprint(series), func(t *testing.T) {
			pool := pgtest.NewPool(t, tmpl)
			t0 := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
			c := &clock{t: t0}
			a := app.New(app.Deps{Pool: pool, Clock: c.now}, app.Config{ScheduleLead: 5 * time.Second})
			if err := activate(t, a, "v1", time.Time{}); err != nil {
				t.Fatal(err)
			}
			// The other series as activations leave them (their versions are
			// not needed for the publisher, which never reads series).
			if _, err := pool.Exec(t.Context(), `INSERT INTO price_series (tenant_id, meter_code, currency, last_version, last_effective_at)
				SELECT 't' || (g % 5000), 'm' || g, 'USD', 1, $1 FROM generate_series(2, $2::int) g`, t0, series); err != nil {
				t.Fatal(err)
			}
			published := 0
			for i := range 4 { // rounds every 2.5s (half the lead) for 10s
				c.set(t0.Add(time.Duration(i) * 2500 * time.Millisecond))
				n, err := a.PublishWatermarks(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				published += n
			}
			if published > 4*allShards {
				t.Fatalf("%d series: %d watermarks in 4 rounds, want at most %d", series, published, 4*allShards)
			}
			t.Logf("%d series: %d watermarks in 10 s of rounds (%.1f/s)", series, published, float64(published)/10)
		})
	}
}

// Activations and watermark publishers racing (two publishers, as two meter
// instances would run): every watermark meter published holds, that is no
// activation of its shard after the one it names takes effect at or
// before it, across two series of the shard.
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
				meterCode := []string{"api_calls", "tokens", "api_calls"}[w] // two series of one shard
				err := activateSeries(t, a, "t1", meterCode, fmt.Sprintf("w%d-%d", w, i), eff)
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

	// Every activation's place in the shard, and when it takes effect; every
	// watermark of t1's shard (with an activation or on its own).
	shard := events.ScheduleShard("t1")
	effective := map[int64]time.Time{}
	type mark struct {
		seq     int64
		through time.Time
	}
	var marks []mark
	for _, d := range published(t, pool) {
		switch p := d.Payload.(type) {
		case events.PriceActivated:
			effective[p.ScheduleSeq] = p.EffectiveAt
			marks = append(marks, mark{p.ScheduleSeq, p.KnownThrough})
		case events.PriceScheduleWatermark:
			if p.Shard == shard {
				marks = append(marks, mark{p.Seq, p.KnownThrough})
			}
		}
	}
	if len(effective) < versions || len(marks) <= len(effective) {
		t.Fatalf("%d versions and %d watermarks (%d publisher rounds, %d activations tried): the race did not happen",
			len(effective), len(marks), rounds.Load(), tried.Load())
	}
	for seq := int64(1); seq <= int64(len(effective)); seq++ {
		if _, ok := effective[seq]; !ok {
			t.Fatalf("the shard's activations are not numbered 1..%d: %d is missing", len(effective), seq)
		}
	}
	for _, m := range marks {
		for seq, eff := range effective {
			if seq > m.seq && !eff.After(m.through) {
				t.Fatalf("watermark of activation %d through %s broken: activation %d takes effect at %s", m.seq,
					m.through.Format(time.RFC3339Nano), seq, eff.Format(time.RFC3339Nano))
			}
		}
	}
	t.Logf("%d versions, %d watermarks checked (%d activations tried)", len(effective), len(marks), tried.Load())
}

func mustDec(s string) decimal.Decimal { return decimal.RequireFromString(s) }
