package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The figures the alerts of a unique_count meter watch are read from what
// each batch added to the value sets (a row per batch), not counted from
// the sets: after 20 batches of 25 users (405 distinct, 5 shared with the
// batch before, over two price versions), the statements that compute the
// usage and spend figures read no row of the sets (invoice_line_value,
// invoice_meter_value) and at most a row per batch and line of the parts
// (the rows their filters drop counted), and the alerts
// see the meter's distinct values across its lines (405, then 406) and
// each line's own (the spend). Counting the sets instead
// (count(DISTINCT) over invoice_line_value) reads every value and fails.
func TestAlertFiguresReadTheBatchesNotTheValues(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newAlertRig(t)
	r.alert("usage", "users", "", "406")
	r.alert("spend", "", "USD", "502")
	user := func(version int64, v string) envelope.Envelope {
		c := events.ChargeRated{MeterCode: "users", Aggregation: "unique_count", Quantity: D("1"), UnitPrice: D("0"),
			PriceVersion: version, Value: v, OccurredAt: time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC),
			SourceSystem: "app", SourceEventID: uuid.NewString(), Currency: "USD"}
		c.Pricing = &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{{UnitPrice: D("1")}}}
		c.Model = pricing.Graduated
		return r.p.ChargeRated(c)
	}
	const batches = 20
	for b := range batches {
		var envs []envelope.Envelope
		for i := range 25 {
			envs = append(envs, user(int64(1+b%2), fmt.Sprint("u", b*20+i)))
		}
		r.decide(envs...)
	}
	wantTold(t, r.told())

	for name, read := range figureReads(t, r) {
		for _, set := range []string{"invoice_line_value", "invoice_meter_value"} {
			if n := read[set]; n > 0 {
				t.Errorf("%s reads %v rows of the value set %s, want none", name, n, set)
			}
		}
		// Each of the meter's two lines sums its parts through the
		// meter's index (tenant, period, currency, meter) and filters
		// the other line's out: at most one row per batch and line.
		for _, parts := range partTables {
			if n := read[parts]; n > 2*batches {
				t.Errorf("%s reads %v rows of %s, want at most one per batch and line (%d)", name, n, parts, 2*batches)
			}
		}
	}
	figures, err := db.New(r.pool).MeterPeriodFigures(ctx, db.MeterPeriodFiguresParams{TenantID: "acme", Period: r.p.Period,
		MeterCodes: []string{"users"}})
	if err != nil || len(figures) != 1 || figures[0].DistinctValues != 405 {
		t.Fatalf("figures %+v, %v; want 405 distinct values", figures, err)
	}
	// One user new to the meter and one new to its version's line: the
	// meter reaches 406 distinct users; the lines, 250 each before, 502
	// (a user is USD 1 under the tier).
	r.decide(user(1, "new"), user(2, "u0"))
	wantTold(t, r.told(), "406 406", "USD 502 502")
}

// The parts the alerts' figures sum are folded as the batches come: after
// 100 batches of a unique_count line (two new users each) the three part
// tables hold at most app.DefaultPartsFoldAt + 1 rows for it, the figures' reads
// read no more, and the alerts still see every user (200, then 201: told
// once, with the exact figure). Without the fold the tables hold a row per
// batch (100) and the test fails.
func TestAlertFiguresFoldTheParts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newAlertRig(t)
	r.alert("usage", "users", "", "201")
	r.alert("spend", "", "USD", "201")
	user := func(v string) envelope.Envelope {
		c := events.ChargeRated{MeterCode: "users", Aggregation: "unique_count", Quantity: D("1"), UnitPrice: D("0"),
			PriceVersion: 1, Value: v, OccurredAt: time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC),
			SourceSystem: "app", SourceEventID: uuid.NewString(), Currency: "USD"}
		c.Pricing = &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{{UnitPrice: D("1")}}}
		c.Model = pricing.Graduated
		return r.p.ChargeRated(c)
	}
	const batches = 100
	for b := range batches {
		r.decide(user(fmt.Sprint("u", 2*b)), user(fmt.Sprint("u", 2*b+1)))
	}
	wantTold(t, r.told())
	most := app.DefaultPartsFoldAt + 1
	for _, parts := range partTables {
		var n int
		if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM `+parts).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > most {
			t.Errorf("%s holds %d rows after %d batches of one line, want at most %d", parts, n, batches, most)
		}
	}
	for name, read := range figureReads(t, r) {
		for _, parts := range partTables {
			if n := read[parts]; n > float64(most) {
				t.Errorf("%s reads %v rows of %s, want at most %d", name, n, parts, most)
			}
		}
	}
	r.decide(user("last"), user("u7"))
	wantTold(t, r.told(), "201 201", "USD 201 201")
}

// partTables are the batches' parts the alerts' figures sum.
var partTables = []string{"invoice_line_part", "invoice_line_value_part", "invoice_meter_value_part"}

// figureReads runs the statements the alerts' figures are computed from
// (MeterPeriodFigures of the users meter, PartLineSums of USD) under
// EXPLAIN ANALYZE and returns, by statement, the rows each read of the part
// tables and the value sets.
func figureReads(t *testing.T, r *alertRig) map[string]map[string]float64 {
	t.Helper()
	ctx := t.Context()
	out := map[string]map[string]float64{}
	for name, run := range map[string]func(q *db.Queries) error{
		"MeterPeriodFigures": func(q *db.Queries) error {
			_, err := q.MeterPeriodFigures(ctx, db.MeterPeriodFiguresParams{TenantID: "acme", Period: r.p.Period, MeterCodes: []string{"users"}})
			return err
		},
		"PartLineSums": func(q *db.Queries) error {
			_, err := q.PartLineSums(ctx, db.PartLineSumsParams{TenantID: "acme", Period: r.p.Period, Currency: "USD"})
			return err
		},
	} {
		plan := pgtest.Explain(t, r.pool, func(rec *pgtest.Recorder) error { return run(db.New(rec)) })
		out[name] = map[string]float64{}
		for _, rel := range append([]string{"invoice_line_value", "invoice_meter_value"}, partTables...) {
			out[name][rel] = plan.RowsRead(t, pgtest.Relation(rel))
		}
	}
	return out
}
