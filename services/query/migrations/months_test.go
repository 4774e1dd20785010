package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// newDB is a database with the query schema up to (not including) version
// before, or the whole schema when before is 0.
func newDB(t *testing.T, before int) *pgxpool.Pool {
	t.Helper()
	set, name := migrations.Set, "query-months"
	if before > 0 {
		set, name = monthparttest.Before(t, migrations.Set, before), fmt.Sprintf("query-before-%04d", before)
	}
	return pgtest.NewPool(t, pgtest.Template{Name: name, Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, set)
	}})
}

// event is one projected event for project.
type event struct {
	id, origin                  uuid.UUID
	typ, period, currency, kind string
}

// project projects e of tenant t1 with the service's statement; whether it
// was stored (false: a duplicate).
func project(t *testing.T, pool *pgxpool.Pool, e event) bool {
	t.Helper()
	origin := ""
	if e.origin != uuid.Nil {
		origin = e.origin.String()
	}
	stored, err := db.New(pool).Project(t.Context(), db.ProjectParams{
		EventIds: []uuid.UUID{e.id}, EventTypes: []string{e.typ}, TenantIds: []string{"t1"},
		AggregateTypes: []string{"x"}, AggregateIds: []string{"x"}, AggregateVersions: []int64{1},
		OccurredAts: []time.Time{time.Now()}, SubjectIds: []string{uuid.NewString()}, OriginEventIds: []string{origin},
		Periods: []string{e.period}, MeterCodes: []string{"api"}, Currencies: []string{e.currency},
		Quantities: []string{"1"}, UnitPrices: []string{""}, Amounts: []string{"1"}, Payloads: [][]byte{[]byte(`{}`)},
		DeltaKinds: []string{e.kind}, DeltaKeys: []string{"USD"}, DeltaAmounts: []decimal.Decimal{decimal.NewFromInt(1)},
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName == partitionOf(t, pool, e.id) {
		return false // projected before: the inbox decides it a duplicate (a partition's projected_event_pkey)
	}
	if err != nil {
		t.Fatalf("project %s: %v", e.typ, err)
	}
	return len(stored) == 1
}

// partitionOf is the partition of projected_event holding the row of id ("" if none).
func partitionOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	return monthparttest.PartitionOf(t, pool, migrations.EventMonths, id)
}

func deltas(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM summary_delta`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// A database with projected events migrates to events by month: every event
// stays (in the default partition), one projected again is still a
// duplicate with no second delta, the upkeep creates the months after the
// one the old events are in, and an event of a month with a partition goes
// there.
func TestMigrateExistingEvents(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newDB(t, 10)
	now := time.Now()
	old := make([]event, 3)
	for i := range old {
		old[i] = event{id: uuid.Must(uuid.NewV7()), typ: "UsageAccepted", period: "2026-12", kind: "usage"}
		if _, err := pool.Exec(ctx, `INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id,
			aggregate_version, occurred_at, period, payload) VALUES ($1, 'UsageAccepted', 't1', 'x', 'x', 1, now(), '2026-12', '{}')`,
			old[i].id); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgmigrate.Up(pool.Config().ConnString(), migrations.Set); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // plans of the table as it was
	created, err := migrations.EventMonths.Ensure(ctx, pool, now)
	if err != nil {
		t.Fatal(err)
	}
	if cur := monthpart.MonthOf("projected_event", now).Name; slices.Contains(created, cur) || len(created) != migrations.EventMonths.Ahead {
		t.Fatalf("created %v: want the %d months after %s only (its events are in the default)", created, migrations.EventMonths.Ahead, cur)
	}
	before := deltas(t, pool)
	for _, e := range old {
		if got := partitionOf(t, pool, e.id); got != "projected_event_default" {
			t.Fatalf("old event %s in %q, want the default partition", e.id, got)
		}
		if project(t, pool, e) {
			t.Fatalf("old event %s projected again", e.id)
		}
	}
	if got := deltas(t, pool); got != before {
		t.Fatalf("%d summary deltas from events projected again", got-before)
	}
	next := event{id: monthparttest.MintedAt(monthpart.Start(now).AddDate(0, 1, 1)), typ: "UsageAccepted", period: "2027-01", kind: "usage"}
	if !project(t, pool, next) {
		t.Fatal("a new event was not stored")
	}
	if got, want := partitionOf(t, pool, next.id), monthpart.MonthOf("projected_event", monthpart.Start(now).AddDate(0, 1, 1)).Name; got != want {
		t.Fatalf("next month's event in %q, want %q", got, want)
	}
	if project(t, pool, next) {
		t.Fatal("a new event projected twice")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM projected_event`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d events, %v; want 4", n, err)
	}
}

// A month is archived only once it is over and every usage fact, charge
// and adjustment in it is on an issued invoice (a fact through its charge,
// in whatever month that was rated); its events leave projected_event, the
// other months' stay, and one of its events projected again afterwards is
// a duplicate that adds no delta. The runtime's upkeep function neither
// detaches nor drops a month.
func TestArchiveEventMonth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newDB(t, 0)
	now := time.Now()
	month := monthpart.Start(now).AddDate(0, -2, 0)
	if _, err := migrations.EventMonths.Ensure(ctx, pool, month); err != nil {
		t.Fatal(err)
	}
	in, next := month.Add(time.Hour), month.AddDate(0, 1, 1)
	usage := event{id: monthparttest.MintedAt(in), typ: "UsageAccepted", period: "2026-09", kind: "usage"}
	charge := event{id: monthparttest.MintedAt(next), origin: usage.id, typ: "ChargeRated", period: "2026-09", currency: "USD", kind: "charged"}
	adjusted := event{id: monthparttest.MintedAt(in), typ: "AdjustmentPosted", period: "2026-08", currency: "USD", kind: "adjusted"}
	kept := event{id: monthparttest.MintedAt(next), typ: "UsageAccepted", period: "2026-10", kind: "usage"}
	for _, e := range []event{usage, charge, adjusted, kept} {
		if !project(t, pool, e) {
			t.Fatalf("%s not stored", e.typ)
		}
	}
	name := monthpart.MonthOf("projected_event", month).Name
	archive := func(at time.Time) (string, error) {
		var got string
		err := pool.QueryRow(ctx, `SELECT projected_event_archive($1)`, at).Scan(&got)
		return got, err
	}
	issue := func(period string) {
		t.Helper()
		if !project(t, pool, event{id: monthparttest.MintedAt(now), typ: "InvoiceIssued", period: period, currency: "USD", kind: "invoiced"}) {
			t.Fatalf("invoice of %s not stored", period)
		}
	}
	if _, err := archive(now); sqlState(err) != "55000" {
		t.Fatalf("archive of this month: %v, want 55000", err)
	}
	for _, op := range []string{"detach", "drop"} {
		if _, err := pool.Exec(ctx, `SELECT projected_event_months($1, $2)`, op, month.Format("200601")); err == nil {
			t.Fatalf("projected_event_months did %s", op)
		}
	}
	if _, err := archive(month); sqlState(err) != "55000" {
		t.Fatalf("archive with no invoice issued: %v, want 55000", err)
	}
	issue("2026-08") // the adjustment's; the fact's charge is not on an issued invoice
	if _, err := archive(month); sqlState(err) != "55000" {
		t.Fatalf("archive with the fact's charge not invoiced: %v, want 55000", err)
	}
	issue("2026-09")
	late := event{id: monthparttest.MintedAt(in.Add(time.Minute)), typ: "AdjustmentPosted", period: "2026-07", currency: "USD", kind: "adjusted"}
	if !project(t, pool, late) {
		t.Fatal("an adjustment not stored")
	}
	if _, err := archive(month); sqlState(err) != "55000" {
		t.Fatalf("archive with an adjustment's invoice open: %v, want 55000", err)
	}
	issue("2026-07")
	if got, err := archive(month.Add(48 * time.Hour)); err != nil || got != name {
		t.Fatalf("archive: %q, %v; want %s", got, err, name)
	}
	if partitionOf(t, pool, usage.id) != "" || partitionOf(t, pool, adjusted.id) != "" || partitionOf(t, pool, kept.id) == "" ||
		partitionOf(t, pool, charge.id) == "" {
		t.Fatal("the archived month's events are still there, or another month's left")
	}
	var inDetached int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+name).Scan(&inDetached); err != nil || inDetached != 3 {
		t.Fatalf("the detached table holds %d events, %v; want 3", inDetached, err)
	}
	before := deltas(t, pool)
	if project(t, pool, usage) || project(t, pool, adjusted) {
		t.Fatal("an event of the archived month projected again")
	}
	if got := deltas(t, pool); got != before {
		t.Fatalf("%d summary deltas from events of the archived month", got-before)
	}
}
