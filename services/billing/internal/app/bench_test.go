package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// BenchmarkRateUsage decides batches of 500 UsageAccepted in one transaction
// each, as the consumer does with one partition's batch: inbox claim, rating
// (the period's shared lock and the charge, pipelined) and the ChargeRated
// outbox append for every event, one commit. It reports charges/s; the
// envelopes are built and marshalled outside the timer.
//
//	go test -run '^$' -bench RateUsage -benchtime 20x ./internal/app/
func BenchmarkRateUsage(b *testing.B) {
	for _, tenants := range []int{1, 3} {
		b.Run(fmt.Sprintf("batch=500/tenants=%d", tenants), func(b *testing.B) {
			benchmarkRateUsage(b, 500, tenants)
		})
	}
}

func benchmarkRateUsage(b *testing.B, batch, tenants int) {
	pool := bt.NewPool(b)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(b, svc)
	bt.DefineMeters(b, pool, ib)
	ctx := b.Context()
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("bench%d", i)
		bt.Decide(b, pool, ib, priceV1(names[i]).Raw(b))
	}
	var rated int
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		msgs := make([]inbox.Message, batch)
		for i := range msgs {
			msgs[i] = inbox.Message{Raw: usageAt(names[i%tenants], 1, "3.5", jan10).Raw(b), Topic: "usage.events.v1", Offset: int64(i)}
		}
		b.StartTimer()
		start := time.Now()
		ds, err := ib.DecideCommit(ctx, pool, msgs) // as the consumer decides a batch
		if err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		for _, d := range ds {
			if d.Outcome != inbox.OutcomeApplied {
				b.Fatalf("decision %+v", d)
			}
		}
		rated += len(ds)
	}
	b.StopTimer()
	b.ReportMetric(float64(rated)/elapsed.Seconds(), "charges/s")
	if n := bt.Count(b, pool, `SELECT count(*) FROM charge`); n != rated {
		b.Fatalf("charges = %d, want %d", n, rated)
	}
}
