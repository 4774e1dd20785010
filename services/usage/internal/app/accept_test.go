package app_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/domain"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

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

func TestPriceEvidenceThroughInbox(t *testing.T) {
	e := usagetest.New(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := func(v int64) usagetest.Price {
		return usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: v, UnitPrice: "0.5",
			EffectiveAt: base.Add(time.Duration(v) * time.Hour)}
	}
	v1, v2, v3, v4 := usagetest.PriceEvent(t, p(1)), usagetest.PriceEvent(t, p(2)), usagetest.PriceEvent(t, p(3)), usagetest.PriceEvent(t, p(4))

	// v1, v2 and a redelivery of v1 in one batch.
	if got, want := fmt.Sprint(outcomes(e.Deliver(t, v1, v2, v1))), "[applied applied duplicate]"; got != want {
		t.Fatalf("decisions %s, want %s", got, want)
	}
	// v4 before v3 waits; v3 applies and wakes it.
	if got, want := fmt.Sprint(outcomes(e.Deliver(t, v4))), "[deferred:version_gap]"; got != want {
		t.Fatalf("decisions %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(outcomes(e.Deliver(t, v3))), "[applied applied]"; got != want {
		t.Fatalf("decisions %s, want %s", got, want)
	}
	// Redelivered later: still one row each.
	if got, want := fmt.Sprint(outcomes(e.Deliver(t, v2, v4))), "[duplicate duplicate]"; got != want {
		t.Fatalf("decisions %s, want %s", got, want)
	}
	if n := e.Count(t, `SELECT count(*) FROM price_evidence WHERE tenant_id = 't1' AND meter_code = 'api'`); n != 4 {
		t.Fatalf("%d evidence rows, want 4", n)
	}
	var unit decimal.Decimal
	if err := e.Pool.QueryRow(t.Context(), `SELECT unit_price FROM price_evidence WHERE version = 3`).Scan(&unit); err != nil || unit.String() != "0.5" {
		t.Fatalf("unit price %v, %v", unit, err)
	}

	// An envelope whose aggregate does not name the payload's series is
	// quarantined, and nothing is recorded.
	bad := usagetest.Price{Tenant: "t1", Meter: "fresh", Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: base}
	raw := usagetest.PriceEvent(t, bad)
	raw = []byte(replaceOnce(string(raw), `"aggregateId":"fresh.USD"`, `"aggregateId":"wrong.USD"`))
	raw = []byte(replaceOnce(string(raw), `"partitionKey":"t1|price|fresh.USD"`, `"partitionKey":"t1|price|wrong.USD"`))
	if got, want := fmt.Sprint(outcomes(e.Deliver(t, raw))), "[quarantined:"+inbox.ReasonPriceAggregateMismatch+"]"; got != want {
		t.Fatalf("decisions %s, want %s", got, want)
	}
	// So is a meter code the meter would never have accepted.
	raw = usagetest.PriceEvent(t, usagetest.Price{Tenant: "t1", Meter: "a/b", Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: base})
	if got, want := fmt.Sprint(outcomes(e.Deliver(t, raw))), "[quarantined:"+inbox.ReasonInvalidMeterCode+"]"; got != want {
		t.Fatalf("decisions %s, want %s", got, want)
	}
	if n := e.Count(t, `SELECT count(*) FROM price_evidence WHERE meter_code <> 'api'`); n != 0 {
		t.Fatalf("%d evidence rows from refused events", n)
	}
}

func replaceOnce(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("not found: " + old)
	}
	return strings.Replace(s, old, new, 1)
}

// BenchmarkAcceptBatch measures accepted usage facts per second through
// App.Accept: batches of 500 new facts of one tenant, one meter with two
// price versions, each batch one transaction (price lookup, one INSERT,
// outbox append of 500 UsageAccepted). One caller at a time, then four.
func BenchmarkAcceptBatch(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			e := usagetest.New(b)
			base := time.Now().Add(-48 * time.Hour).UTC()
			e.ApplyPrices(b,
				usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: 1, UnitPrice: "0.001", EffectiveAt: base},
				usagetest.Price{Tenant: "t1", Meter: "api", Currency: "USD", Version: 2, UnitPrice: "0.002", EffectiveAt: base.Add(24 * time.Hour)},
			)
			a := app.New(app.Deps{Pool: e.Pool}, app.Config{})
			const size = 500
			batches := make(chan []domain.Usage, workers)
			go func() {
				defer close(batches)
				for n := range b.N {
					batch := make([]domain.Usage, size)
					for i := range batch {
						batch[i] = domain.Usage{
							SourceSystem: "bench", SourceEventID: fmt.Sprintf("e-%d-%d", n, i), MeterCode: "api",
							Quantity: decimal.NewFromInt(int64(i%7 + 1)), OccurredAt: base.Add(time.Duration(i) * time.Minute),
						}
					}
					batches <- batch
				}
			}()
			b.ResetTimer()
			start := time.Now()
			errs := make(chan error, workers)
			for range workers {
				go func() {
					for batch := range batches {
						res, err := a.Accept(b.Context(), "t1", "", batch)
						if err != nil {
							errs <- err
							return
						}
						if res[0].Outcome != app.Created {
							errs <- fmt.Errorf("outcome %v", res[0].Outcome)
							return
						}
					}
					errs <- nil
				}()
			}
			for range workers {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N*size)/elapsed.Seconds(), "facts/s")
		})
	}
}

// The meter's schedule watermarks share its topic: usage absorbs them
// (applied, no effect) instead of quarantining an unknown event type.
func TestScheduleWatermarkAbsorbed(t *testing.T) {
	e := usagetest.New(t)
	through := time.Now().UTC().Truncate(time.Microsecond)
	env, err := envelope.New(envelope.Meta{
		EventType: events.TypePriceScheduleWatermark, SchemaVersion: 1, TenantID: events.ScheduleTenant,
		AggregateType: events.AggregatePriceSchedule, AggregateID: events.PriceScheduleID(3, through),
		AggregateVersion: 1, OccurredAt: through, Producer: "meter",
	}, events.PriceScheduleWatermark{Shard: 3, Shards: events.ScheduleShards, Seq: 1, KnownThrough: through})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(e.Deliver(t, raw)); len(got) != 1 || got[0] != "applied" {
		t.Fatalf("decisions %v, want applied", got)
	}
	if n := e.Count(t, `SELECT count(*) FROM price_evidence`) + e.Count(t, `SELECT count(*) FROM outbox_event`); n != 0 {
		t.Fatalf("a watermark wrote %d rows", n)
	}
}
