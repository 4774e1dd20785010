package app_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The months a period's reconciliation reads are found by skip scans, a
// few index entries per month, not by reading every off-month charge (no
// statement may grow with a tenant's volume): with 1,200 late charges —
// 300 of each of three earlier months rated into January, 300 of January
// rated into February —
// the statement lists the five months and reads at most a few dozen rows,
// where a DISTINCT over the charges read all 1,200.
func TestReconciliationMonthsReadAFewRowsAMonth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("acme").Raw(t), usageAt("acme", 0, "1", jan10).Raw(t))
	// Copies of the rated charge, new ids (the charge id a UUIDv7 of now,
	// decision 0025), late, each occurring a minute after the one before
	// from occurred, rated into period.
	var cols, vals string
	if err := pool.QueryRow(ctx, `
		SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position),
		       string_agg(CASE column_name
		                  WHEN 'charge_id' THEN $$(lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
		                                       || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid$$
		                  WHEN 'event_id' THEN 'gen_random_uuid()'
		                  WHEN 'usage_event_id' THEN 'gen_random_uuid()'
		                  WHEN 'usage_id' THEN 'gen_random_uuid()'
		                  WHEN 'late' THEN 'true'
		                  WHEN 'period' THEN '$2::text'
		                  WHEN 'occurred_at' THEN '$3::timestamptz + g * interval ''1 minute'''
		                  ELSE 'c.' || quote_ident(column_name) END, ', ' ORDER BY ordinal_position)
		FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'charge' AND is_generated = 'NEVER'`).Scan(&cols, &vals); err != nil {
		t.Fatal(err)
	}
	const each = 300
	for _, c := range []struct {
		period   string
		occurred time.Time
	}{
		{"2026-01", time.Date(2025, 10, 3, 0, 0, 0, 0, time.UTC)},
		{"2026-01", time.Date(2025, 11, 3, 0, 0, 0, 0, time.UTC)},
		{"2026-01", time.Date(2025, 12, 3, 0, 0, 0, 0, time.UTC)},
		{"2026-02", time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)},
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO charge (`+cols+`) SELECT `+vals+`
			FROM charge c CROSS JOIN generate_series(1, $4) g WHERE c.tenant_id = $1 AND NOT c.late`,
			"acme", c.period, c.occurred, each); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE charge`); err != nil {
		t.Fatal(err)
	}
	params := db.ReconciliationMonthsParams{TenantID: "acme", Period: "2026-01",
		Month: pgtype.Timestamp{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Valid: true}}
	months, err := db.New(pool).ReconciliationMonths(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2025-10", "2025-11", "2025-12", "2026-01", "2026-02"}
	if !slices.Equal(months, want) {
		t.Fatalf("months %v, want %v", months, want)
	}
	plan := pgtest.Explain(t, pool, func(rec *pgtest.Recorder) error {
		_, err := db.New(rec).ReconciliationMonths(ctx, params)
		return err
	})
	// A probe reads at most an entry of each of charge's partitions.
	n, most := plan.RowsRead(t, func(string) bool { return true }), float64(10*len(want))
	t.Logf("ReconciliationMonths read %v rows for %d months over %d off-month charges", n, len(want), 4*each)
	if n > most {
		t.Fatalf("ReconciliationMonths read %v rows for %d months, want at most %v whatever the off-month charges (%d): %s",
			n, len(want), most, 4*each, plan)
	}
}
