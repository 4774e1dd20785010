package migrations_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// newDB is a database with the invoice schema up to (not including) version
// before, or the whole schema when before is 0.
func newDB(t *testing.T, before int) *pgxpool.Pool {
	t.Helper()
	set, name := migrations.Set, "invoice-months"
	if before > 0 {
		set, name = monthparttest.Before(t, migrations.Set, before), "invoice-before-charge-months"
	}
	return pgtest.NewPool(t, pgtest.Template{Name: name, Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, set)
	}})
}

// addCharge records one ChargeRated of origin for tenant t1's period with the
// service's statement; what it answered.
func addCharge(t *testing.T, pool *pgxpool.Pool, origin uuid.UUID, period string) db.AddChargesRow {
	t.Helper()
	rows, err := addCharges(t, pool, origin, period)
	if err != nil || len(rows) != 1 {
		t.Fatalf("add charge: %v %v", rows, err)
	}
	return rows[0]
}

// addCharges runs AddCharges on one charge of origin.
func addCharges(t *testing.T, pool *pgxpool.Pool, origin uuid.UUID, period string) ([]db.AddChargesRow, error) {
	one := decimal.NewFromInt(1)
	return db.New(pool).AddCharges(t.Context(), db.AddChargesParams{
		OriginEventIds: []uuid.UUID{origin}, ChargeIds: []uuid.UUID{uuid.New()}, UsageEventIds: []uuid.UUID{uuid.New()},
		TenantIds: []string{"t1"}, Periods: []string{period}, Currencies: []string{"USD"}, MeterCodes: []string{"api"},
		PriceVersions: []int64{1}, UnitPrices: []decimal.Decimal{one}, Quantities: []decimal.Decimal{one},
		Amounts: []decimal.Decimal{one}, NewInvoiceIds: []uuid.UUID{uuid.Must(uuid.NewV7())},
		Aggregations: []string{"sum"}, DimensionsKeys: []string{""}, Unpriceds: []bool{false},
		OccurredAts: []time.Time{time.Now()}, SourceSystems: []string{"gw"}, SourceEventIds: []string{origin.String()},
		UniqValues: []string{""},
	})
}

// uniqueViolationOf is the constraint err violates when it is a unique
// violation ("" when not).
func uniqueViolationOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return pgErr.ConstraintName
	}
	return ""
}

// partitionOf is the partition of invoice_charge holding the row of id ("" if none).
func partitionOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	return monthparttest.PartitionOf(t, pool, migrations.ChargeMonths, id)
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// A database with charges migrates to charges by month: every charge stays
// (in the default partition), a redelivery of one is still recognised, the
// upkeep creates the months after the one the old charges are in, a charge
// of a month with a partition goes there, and charges stay immutable in
// every partition.
func TestMigrateExistingCharges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newDB(t, 19)
	now := time.Now()
	old := make([]uuid.UUID, 3)
	for i := range old {
		old[i] = uuid.Must(uuid.NewV7())
		if _, err := pool.Exec(ctx, `INSERT INTO invoice_charge (origin_event_id, charge_id, usage_event_id, tenant_id, period,
			currency, meter_code, price_version, unit_price, quantity, amount)
			VALUES ($1, gen_random_uuid(), gen_random_uuid(), 't1', '2026-12', 'USD', 'api', 1, 1, 1, 1)`, old[i]); err != nil {
			t.Fatal(err)
		}
	}
	url := pool.Config().ConnString()
	if err := pgmigrate.Up(url, migrations.Set); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // plans of the table as it was
	created, err := migrations.ChargeMonths.Ensure(ctx, pool, now)
	if err != nil {
		t.Fatal(err)
	}
	if cur := monthpart.MonthOf("invoice_charge", now).Name; slices.Contains(created, cur) || len(created) != migrations.ChargeMonths.Ahead {
		t.Fatalf("created %v: want the %d months after %s only (its charges are in the default)", created, migrations.ChargeMonths.Ahead, cur)
	}
	for _, id := range old {
		if got := partitionOf(t, pool, id); got != "invoice_charge_default" {
			t.Fatalf("old charge %s in %q, want the default partition", id, got)
		}
		// The default partition's copy of invoice_charge_origin_key, which
		// the inbox decides a duplicate (inbox.Options.OriginConstraints).
		if rows, err := addCharges(t, pool, id, "2026-12"); uniqueViolationOf(err) != "invoice_charge_default_origin_key" {
			t.Fatalf("redelivery of an old charge: %v %v, want a violation of invoice_charge_default_origin_key", rows, err)
		}
	}
	next := monthparttest.MintedAt(monthpart.Start(now).AddDate(0, 1, 1))
	if r := addCharge(t, pool, next, "2026-12"); !r.Added {
		t.Fatalf("a new charge: %+v", r)
	}
	if got, want := partitionOf(t, pool, next), monthpart.MonthOf("invoice_charge", monthpart.Start(now).AddDate(0, 1, 1)).Name; got != want {
		t.Fatalf("next month's charge in %q, want %q", got, want)
	}
	if rows, err := addCharges(t, pool, next, "2026-12"); uniqueViolationOf(err) != partitionOf(t, pool, next)+"_pkey" {
		t.Fatalf("redelivery of a new charge: %v %v, want a violation of its month partition's key", rows, err)
	}
	for _, id := range []uuid.UUID{old[0], next} {
		if _, err := pool.Exec(ctx, `UPDATE invoice_charge SET amount = 2 WHERE origin_event_id = $1`, id); sqlState(err) != "23000" {
			t.Fatalf("update of charge in %s: %v, want refused", partitionOf(t, pool, id), err)
		}
		if _, err := pool.Exec(ctx, `DELETE FROM invoice_charge WHERE origin_event_id = $1`, id); sqlState(err) != "23000" {
			t.Fatalf("delete of charge in %s: %v, want refused", partitionOf(t, pool, id), err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoice_charge`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d charges, %v; want 4", n, err)
	}
}

// A month is archived only once it is over and every charge in it is on an
// issued invoice; its charges leave invoice_charge, the other months' stay,
// and a ChargeRated of it redelivered afterwards is a duplicate, not a
// charge after issue. The runtime's upkeep function neither detaches nor
// drops a month.
func TestArchiveChargeMonth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newDB(t, 0)
	now := time.Now()
	month := monthpart.Start(now).AddDate(0, -2, 0)
	if _, err := migrations.ChargeMonths.Ensure(ctx, pool, month); err != nil {
		t.Fatal(err)
	}
	archived, kept := monthparttest.MintedAt(month.Add(time.Hour)), monthparttest.MintedAt(month.AddDate(0, 1, 1))
	for _, id := range []uuid.UUID{archived, kept} {
		if r := addCharge(t, pool, id, "2026-09"); !r.Added {
			t.Fatalf("charge: %+v", r)
		}
	}
	name := monthpart.MonthOf("invoice_charge", month).Name
	archive := func(at time.Time) (string, error) {
		var got string
		err := pool.QueryRow(ctx, `SELECT invoice_charge_archive($1)`, at).Scan(&got)
		return got, err
	}
	if _, err := archive(month); sqlState(err) != "55000" {
		t.Fatalf("archive with the invoice open: %v, want 55000", err)
	}
	if _, err := archive(now); sqlState(err) != "55000" {
		t.Fatalf("archive of this month: %v, want 55000", err)
	}
	for _, op := range []string{"detach", "drop"} {
		if _, err := pool.Exec(ctx, `SELECT invoice_charge_months($1, $2)`, op, month.Format("200601")); err == nil {
			t.Fatalf("invoice_charge_months did %s", op)
		}
	}
	for _, q := range []string{
		`INSERT INTO period_close (tenant_id, period, close_event_id, closed_at, charges, adjustments)
		 VALUES ('t1', '2026-09', gen_random_uuid(), now(), 2, 0)`,
		`UPDATE invoice SET status = 'issued', subtotal = 2, total = 2, issued_at = now(),
		 close_event_id = gen_random_uuid(), issued_event_id = gen_random_uuid(), number = 1 WHERE tenant_id = 't1'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := archive(month.Add(48 * time.Hour)); err != nil || got != name {
		t.Fatalf("archive: %q, %v; want %s", got, err, name)
	}
	if partitionOf(t, pool, archived) != "" || partitionOf(t, pool, kept) == "" {
		t.Fatal("the archived month's charge is still there, or another month's left")
	}
	var inDetached int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+name).Scan(&inDetached); err != nil || inDetached != 1 {
		t.Fatalf("the detached table holds %d charges, %v", inDetached, err)
	}
	if r := addCharge(t, pool, archived, "2026-09"); r.Added || !r.Known {
		t.Fatalf("redelivery of an archived charge: %+v, want known (a duplicate)", r)
	}
	if r := addCharge(t, pool, monthparttest.MintedAt(now), "2026-09"); r.Added || r.Known || !r.Closed {
		t.Fatalf("a new charge of the issued period: %+v, want a charge after issue", r)
	}
}

// A close's tally reads a tenant's period in chunks: partitioned, one chunk
// is still one bounded range scan of the reconciliation index per month
// (a merge of them under the chunk's limit), never a scan of a month's
// rows of other tenants or periods.
func TestTallyChunkIsAnIndexScanPerMonth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newDB(t, 0)
	start := monthpart.Start(time.Now()).AddDate(0, -2, 0)
	if _, err := migrations.ChargeMonths.Ensure(ctx, pool, start); err != nil { // its month and the two after it
		t.Fatal(err)
	}
	// 3 months of 20,000 charges of 2 tenants each, a period much larger
	// than a chunk, as a large close is.
	for m := range 3 {
		at := start.AddDate(0, m, 0)
		if _, err := pool.Exec(ctx, `
			INSERT INTO invoice_charge (origin_event_id, charge_id, usage_event_id, tenant_id, period, currency,
			                            meter_code, price_version, unit_price, quantity, amount)
			SELECT `+monthparttest.FillIDs+`, gen_random_uuid(), gen_random_uuid(), 't' || (g % 2), '2026-09', 'USD',
			       'api', 1, 1, 1, 1
			FROM `+monthparttest.FillFrom("$2"), at.UnixMilli(), 20000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE invoice_charge`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `EXPLAIN (COSTS OFF)
		SELECT ch.usage_event_id, ch.origin_event_id, ch.amount FROM invoice_charge ch
		WHERE ch.tenant_id = 't1' AND ch.period = '2026-09'
		  AND (ch.usage_event_id, ch.origin_event_id) > ('00000000-0000-0000-0000-000000000000'::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
		ORDER BY ch.usage_event_id, ch.origin_event_id LIMIT 100`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var scans, seq int
	for _, l := range lines {
		switch {
		case strings.Contains(l, "Index Scan using") &&
			(strings.Contains(l, "reconciliation_idx") || strings.Contains(l, "usage_event_id")): // the index each month took from the parent
			scans++
		case strings.Contains(l, "Seq Scan"), strings.Contains(l, "Bitmap"),
			strings.TrimSpace(l) == "Sort", strings.Contains(l, "->  Sort"):
			seq++
		}
	}
	months, err := migrations.ChargeMonths.Parts(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lines[1], "Merge Append") || scans != len(months)+1 || seq != 0 {
		t.Fatalf("plan of a tally chunk over %d months and the default:\n%s", len(months), strings.Join(lines, "\n"))
	}
}
