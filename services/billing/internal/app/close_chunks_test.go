package app_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// TestCloseTalliesInChunks: a period of 75 charges closed with a chunk of 4
// is tallied in ceil(75/4) transactions of at most 4 charges each; a crash
// in the middle (chunk 7 rolled back) leaves the period closing with the
// first 6 chunks' progress, and the retry carries on from there, not from
// the start. The close's tallies are the period's charges (counted, summed
// and digested from billing's rows), and the lines it prices fees from are
// PeriodLines' over the charges, for every aggregation (latest with ties
// broken by source across chunks, unique_count with values repeated across
// chunks). The tally's distinct values are purged after the close.
func TestCloseTalliesInChunks(t *testing.T) {
	t.Parallel()
	const chunk = 4
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return feb3 }}, app.Config{CloseChunk: chunk})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	const tenant = "chunky"
	raws := [][]byte{priceV1(tenant).Raw(t), krwPrice(tenant).Raw(t)}
	aggs := []string{catalog.Count, catalog.Max, catalog.Latest, catalog.UniqueCount}
	for _, agg := range aggs {
		meter := "m_" + agg
		raws = append(raws, bt.Meter{Code: meter, Aggregation: agg, ValueProperty: map[bool]string{true: "user"}[agg == catalog.UniqueCount]}.Raw(t),
			bt.Price{Tenant: tenant, Meter: meter, Currency: "USD", Version: 1, UnitPrice: "0.5", EffectiveAt: jan1}.Raw(t))
	}
	bt.Decide(t, pool, ib, raws...)
	var facts [][]byte
	for i := range 15 {
		at := jan10.Add(time.Duration(i%5) * time.Hour) // ties in occurrence, broken by source id
		facts = append(facts,
			usageAt(tenant, 0, fmt.Sprint(i+1), at).Raw(t),
			bt.Usage{Tenant: tenant, Meter: "sms", Currency: "KRW", Quantity: "2", OccurredAt: at}.Raw(t))
		for _, agg := range aggs {
			u := fact(tenant, "m_"+agg, "USD", fmt.Sprint((i*7)%11+1), at, map[string]string{"user": fmt.Sprint("u", i%6)})
			u.SourceSystem, u.SourceEventID = "src", fmt.Sprintf("%s-%02d", agg, (i*5)%15)
			facts = append(facts, u.Raw(t))
		}
	}
	for _, d := range bt.Decide(t, pool, ib, facts...) {
		if d.Outcome != inbox.OutcomeApplied {
			t.Fatalf("decision %+v", d)
		}
	}
	const charges = 15 * 6
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE tenant_id = $1 AND period = '2026-01'`, tenant); n != charges {
		t.Fatalf("%d charges, want %d", n, charges)
	}

	// A crash in chunk 7: the close fails, the period stays closing, and
	// what the first six chunks tallied is kept.
	crash := errors.New("crash in chunk 7")
	svc.SetAfterChunk(func(n int64) error {
		if n == 7 {
			return crash
		}
		return nil
	})
	const key = "close-in-chunks"
	if _, err := tryClose(t.Context(), svc, tenant, "2026-01", key); !errors.Is(err, crash) {
		t.Fatalf("close = %v, want the crash", err)
	}
	if st, _ := periodStatus(t, pool, tenant, "2026-01"); st != "closing" {
		t.Fatalf("status after the crash = %s", st)
	}
	var chunks, tallied int64
	if err := pool.QueryRow(t.Context(), `SELECT chunks, charges FROM close_progress WHERE tenant_id = $1 AND period = '2026-01'`,
		tenant).Scan(&chunks, &tallied); err != nil {
		t.Fatal(err)
	}
	if chunks != 6 || tallied != 6*chunk {
		t.Fatalf("after the crash: %d chunks, %d charges tallied; want 6 and %d", chunks, tallied, 6*chunk)
	}
	if n := bt.Count(t, pool, `SELECT coalesce(sum(charges), 0) FROM close_line WHERE tenant_id = $1`, tenant); n != 6*chunk {
		t.Fatalf("the lines hold %d charges after the crash, want %d", n, 6*chunk)
	}
	if n := len(bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))); n != 0 {
		t.Fatalf("%d closes published by a crashed close", n)
	}

	// The retry resumes at chunk 7 and runs every later one with at most
	// a chunk of charges.
	var seen []int64
	svc.SetAfterChunk(func(n int64) error {
		seen = append(seen, n)
		return nil
	})
	closePeriod(t, svc, tenant, "2026-01", key)
	want := int64(charges/chunk + 1) // the last chunk comes back short
	if len(seen) == 0 || seen[0] != 7 || seen[len(seen)-1] != want || int64(len(seen)) != want-6 {
		t.Fatalf("chunks of the retry = %v, want 7..%d", seen, want)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Charges != charges {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
	checkClose(t, pool, tenant, closes[0])

	// The lines the close read are the charges' lines.
	q := db.New(pool)
	fromCharges, err := q.PeriodLines(t.Context(), db.PeriodLinesParams{TenantID: tenant, Period: "2026-01"})
	if err != nil {
		t.Fatal(err)
	}
	fromTally, err := q.ClosingLines(t.Context(), db.ClosingLinesParams{TenantID: tenant, Period: "2026-01"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fromCharges) != 6 || len(fromTally) != len(fromCharges) {
		t.Fatalf("lines: %d from the charges, %d from the tally", len(fromCharges), len(fromTally))
	}
	for i, l := range fromTally {
		c := fromCharges[i]
		if got := db.PeriodLinesRow(l); bt.JSON(got) != bt.JSON(c) || !got.Quantity.Equal(c.Quantity) || !got.Amount.Equal(c.Amount) {
			t.Errorf("line %d: tallied %s, from the charges %s", i, bt.JSON(got), bt.JSON(c))
		}
	}
	// The tally's distinct values are purged; its lines stay.
	if n := bt.Count(t, pool, `SELECT count(*) FROM close_value WHERE tenant_id = $1`, tenant) +
		bt.Count(t, pool, `SELECT count(*) FROM close_progress WHERE tenant_id = $1`, tenant); n != 0 {
		t.Fatalf("%d tally rows left after the close", n)
	}
}
