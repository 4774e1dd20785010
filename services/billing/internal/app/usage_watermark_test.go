package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// usageMark is usage's watermark of one partition, as usage publishes it.
func usageMark(t *testing.T, partition, partitions int32, through time.Time) []byte {
	t.Helper()
	env, err := envelope.New(envelope.Meta{
		EventType: events.TypeUsageAcceptedThrough, SchemaVersion: 1, TenantID: events.UsageWatermarkTenant,
		AggregateType: events.AggregateUsageWatermark, AggregateID: events.UsageWatermarkID(partition, through, 0),
		AggregateVersion: 1, OccurredAt: through, Producer: "usage",
	}, events.UsageAcceptedThrough{Partition: partition, Partitions: partitions, Through: through})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// A close waits for usage (decision 0014): requested, it answers closing and
// the period stays open, its usage still rated into it, while a partition
// has no watermark at or after the request, or a fact of the period waits
// for its price schedule; the scheduler then closes it under the
// requester's actor, counting every such fact, none late.
func TestCloseWaitsForUsageWatermarks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := bt.NewPool(t)
	clk := newClock(jan10)
	// Closes wait for usage; an HTTP close answers at once (after its first look).
	svc := app.New(app.Deps{Pool: pool, Clock: clk.now}, app.Config{WaitForUsage: true, CloseWait: time.Nanosecond})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	price := priceV1("t1")
	price.KnownThrough = jan20 // the schedule is known through 20 January
	bt.Decide(t, pool, ib, price.Raw(t), usageAt("t1", 0, "4", jan10).Raw(t))

	requested := time.Date(2026, 1, 25, 0, 0, 0, 0, time.UTC)
	clk.set(requested)
	reply, err := tryClose(ctx, svc, "t1", "2026-01", "close-1")
	var body struct{ Period, Status string }
	if err != nil || reply.Status != http.StatusAccepted || json.Unmarshal(reply.Body, &body) != nil || body.Status != "closing" {
		t.Fatalf("close = %d %s, %v; want 202 closing", reply.Status, reply.Body, err)
	}
	waiting := func(want string) {
		t.Helper()
		if run, err := svc.CloseDuePeriods(ctx); err != nil || len(run.Closed) != 0 {
			t.Fatalf("pass = %+v, %v; want nothing closed", run, err)
		}
		est, err := svc.PeriodEstimate(ctx, "t1", "2026-01")
		if err != nil || est.Status != "closing" || est.CloseRequestedAt == nil || !est.CloseRequestedAt.Equal(requested) ||
			!strings.Contains(est.WaitingFor, want) {
			t.Fatalf("period = %s, %v; want closing, waiting for %q", bt.JSON(est), err, want)
		}
		if st, _ := periodStatus(t, pool, "t1", "2026-01"); st != "open" {
			t.Fatalf("stored status %s, want open", st)
		}
	}
	waiting("no usage watermark received yet")
	bt.Decide(t, pool, ib, usageMark(t, 0, 2, requested.Add(time.Second)))
	waiting("no usage watermark yet from 1 of 2 partitions")
	bt.Decide(t, pool, ib, usageMark(t, 1, 2, requested.Add(-time.Second)))
	waiting("usage watermark of 1 of 2 partitions before the close request")
	// A fact accepted before the request arrives now: rated into January.
	bt.Decide(t, pool, ib, usageAt("t1", 0, "1", jan15).Raw(t))
	// One whose schedule is not known yet waits in the inbox: so does the close.
	bt.Decide(t, pool, ib, usageAt("t1", 0, "2", jan20.Add(time.Hour)).Raw(t))
	bt.Decide(t, pool, ib, usageMark(t, 1, 2, requested.Add(time.Second)))
	waiting("1 usage facts of the period deferred")
	// A second request keeps the first's time; the same key carries on.
	clk.set(requested.Add(time.Hour))
	if reply, err := tryClose(ctx, svc, "t1", "2026-01", "close-1"); err != nil ||
		!strings.Contains(string(reply.Body), "closing") {
		t.Fatalf("retry = %d %s, %v", reply.Status, reply.Body, err)
	}
	// The schedule becomes known: the fact is rated, the close proceeds.
	bt.Decide(t, pool, ib, bt.Watermark{Tenant: "t1", Seq: 1, KnownThrough: jan20.Add(90 * time.Minute)}.Raw(t))
	run, err := svc.CloseDuePeriods(ctx)
	if err != nil || len(run.Closed) != 1 || run.Closed[0] != "t1/2026-01" {
		t.Fatalf("pass = %+v, %v; want t1/2026-01 closed", run, err)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Charges != 3 || closes[0].Actor != "closer@t1.example" {
		t.Fatalf("closes = %s; want one of 3 charges by the requester", bt.JSON(closes))
	}
	for _, c := range charges(t, svc, "t1", "2026-01") {
		if c.Late {
			t.Fatalf("charge %s late", bt.JSON(c))
		}
	}
	// The key answers closed now, and a fact arriving after the close is late.
	closePeriod(t, svc, "t1", "2026-01", "close-1")
	bt.Decide(t, pool, ib, usageAt("t1", 0, "1", jan15).Raw(t))
	if got := charges(t, svc, "t1", "2026-02"); len(got) != 1 || !got[0].Late {
		t.Fatalf("February charges = %s, want one late", bt.JSON(got))
	}
}
