package app_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// TestCloseTalliesInChunks: a period of 90 charges closed with a chunk of 4
// is tallied in ceil(90/4) transactions of at most 4 charges each; a crash
// in the middle (chunk 7 rolled back) leaves the period closing with the
// first 6 chunks' progress, and the retry carries on from there, not from
// the start. The close's tallies are the period's charges (counted, summed
// and digested from billing's rows), and the lines it prices fees from are
// PeriodLines' over the charges, for every aggregation (latest with ties
// broken by source across chunks, unique_count with values repeated across
// chunks). Before the close, the period's read sums the lines' parts,
// written by 15 batches and folded past two a line: the same lines. The
// tally's distinct values and the lines' value sets are purged after the
// close.
func TestCloseTalliesInChunks(t *testing.T) {
	t.Parallel()
	const chunk, foldAt = 4, 2
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return feb3 }}, app.Config{CloseChunk: chunk, PartsFoldAt: foldAt})
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
	// Fifteen batches: each adds a part to each line, and the parts of a
	// line past the fold's two are folded into one.
	for i := range 15 {
		at := jan10.Add(time.Duration(i%5) * time.Hour) // ties in occurrence, broken by source id
		facts := [][]byte{usageAt(tenant, 0, fmt.Sprint(i+1), at).Raw(t),
			bt.Usage{Tenant: tenant, Meter: "sms", Currency: "KRW", Quantity: "2", OccurredAt: at}.Raw(t)}
		for _, agg := range aggs {
			u := fact(tenant, "m_"+agg, "USD", fmt.Sprint((i*7)%11+1), at, map[string]string{"user": fmt.Sprint("u", i%6)})
			u.SourceSystem, u.SourceEventID = "src", fmt.Sprintf("%s-%02d", agg, (i*5)%15)
			facts = append(facts, u.Raw(t))
		}
		for _, d := range bt.Decide(t, pool, ib, facts...) {
			if d.Outcome != inbox.OutcomeApplied {
				t.Fatalf("decision %+v", d)
			}
		}
	}
	const charges = 15 * 6
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE tenant_id = $1 AND period = '2026-01'`, tenant); n != charges {
		t.Fatalf("%d charges, want %d", n, charges)
	}

	// The open period's read sums its lines' parts, folded to at most
	// three a line: the lines of the charges.
	want := linesFromCharges(t, pool, tenant, "2026-01")
	if n := bt.Count(t, pool, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM charge_line_part
		WHERE tenant_id = $1 GROUP BY meter_code, currency, plan_code, price_version, dimensions_key, unpriced, aggregation) p`,
		tenant); n > foldAt+1 {
		t.Fatalf("a line has %d parts after 15 batches, want at most %d", n, foldAt+1)
	}
	walked, err := svc.PartLines(t.Context(), tenant, "2026-01")
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "read from parts", walked, want)
	if _, err := svc.PeriodEstimate(t.Context(), tenant, "2026-01"); err != nil {
		t.Fatal(err)
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
	last := int64(charges/chunk + 1) // the last chunk comes back short
	if len(seen) == 0 || seen[0] != 7 || seen[len(seen)-1] != last || int64(len(seen)) != last-6 {
		t.Fatalf("chunks of the retry = %v, want 7..%d", seen, last)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Charges != charges {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
	checkClose(t, pool, tenant, closes[0])

	// The lines the close read are the charges' lines, and those the
	// open read summed from the parts.
	fromTally, err := svc.TallyLines(t.Context(), tenant, "2026-01")
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "tallied", fromTally, want)
	if bt.JSON(fromTally) != bt.JSON(walked) {
		t.Errorf("tallied lines %s, from parts %s", bt.JSON(fromTally), bt.JSON(walked))
	}
	// The tally's distinct values and the lines' value sets are purged;
	// its lines and their parts stay.
	if n := bt.Count(t, pool, `SELECT count(*) FROM close_value WHERE tenant_id = $1`, tenant) +
		bt.Count(t, pool, `SELECT count(*) FROM charge_line_value WHERE tenant_id = $1`, tenant) +
		bt.Count(t, pool, `SELECT count(*) FROM close_progress WHERE tenant_id = $1`, tenant); n != 0 {
		t.Fatalf("%d tally rows left after the close", n)
	}
}

// linesFromCharges computes a period's lines from its charges, one by one
// in Go: the key, charges, quantity by aggregation and own amounts.
func linesFromCharges(t *testing.T, pool *pgxpool.Pool, tenant, period string) map[string]app.Line {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT meter_code, currency, plan_code, price_version, dimensions_key, unpriced,
		aggregation, quantity, amount, value, occurred_at, source_system, source_event_id
		FROM charge WHERE tenant_id = $1 AND period = $2`, tenant, period)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type latest struct {
		at             time.Time
		system, source string
	}
	out := map[string]app.Line{}
	values := map[string]map[string]bool{}
	latests := map[string]latest{}
	for rows.Next() {
		var l app.Line
		var qty, amount decimal.Decimal
		var value, system, source string
		var at time.Time
		if err := rows.Scan(&l.MeterCode, &l.Currency, &l.PlanCode, &l.PriceVersion, &l.DimensionsKey, &l.Unpriced,
			&l.Aggregation, &qty, &amount, &value, &at, &system, &source); err != nil {
			t.Fatal(err)
		}
		k := lineKey(l)
		have, ok := out[k]
		if !ok {
			have = l
			values[k] = map[string]bool{}
		}
		have.Charges++
		have.Amount = have.Amount.Add(amount)
		switch l.Aggregation {
		case catalog.Count:
			have.Quantity = decimal.NewFromInt(have.Charges)
		case catalog.Max:
			have.Quantity = decimal.Max(have.Quantity, qty)
		case catalog.Latest:
			was, seen := latests[k]
			if !seen || at.After(was.at) || (at.Equal(was.at) && (system > was.system || (system == was.system && source > was.source))) {
				latests[k] = latest{at, system, source}
				have.Quantity = qty
			}
		case catalog.UniqueCount:
			values[k][value] = true
			have.Quantity = decimal.NewFromInt(int64(len(values[k])))
		default:
			have.Quantity = have.Quantity.Add(qty)
		}
		out[k] = have
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func lineKey(l app.Line) string {
	return fmt.Sprint(l.MeterCode, "|", l.Currency, "|", l.PlanCode, "|", l.PriceVersion, "|", l.DimensionsKey, "|",
		l.Unpriced, "|", l.Aggregation)
}

// sameLines fails unless got are the lines of want: the same keys,
// charges, quantities and amounts.
func sameLines(t *testing.T, what string, got []app.Line, want map[string]app.Line) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d lines, want %d", what, len(got), len(want))
	}
	for _, l := range got {
		w, ok := want[lineKey(l)]
		if !ok || l.Charges != w.Charges || !l.Quantity.Equal(w.Quantity) || !l.Amount.Equal(w.Amount) {
			t.Errorf("%s line %s: %d charges, quantity %s, amount %s; want %d, %s, %s", what, lineKey(l),
				l.Charges, l.Quantity, l.Amount, w.Charges, w.Quantity, w.Amount)
		}
	}
}
