package migrations_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/domain"
	"github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/services/query/migrations"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// usage is the UsageAccepted of tenant t1's fact (source system "test",
// sourceEventID) of quantity of meter, which occurred at at, with event id
// id (its month is the fact's partition).
func usage(t *testing.T, id uuid.UUID, meter, sourceEventID, quantity string, at time.Time) querytest.Event {
	t.Helper()
	usageID := uuid.New()
	e, err := events.New(events.UsageAccepted{UsageID: usageID, SourceSystem: "test", SourceEventID: sourceEventID,
		MeterCode: meter, Quantity: querytest.D(quantity), OccurredAt: at, Currency: "USD"},
		events.Meta{Producer: "usage", TenantID: "t1", AggregateID: usageID.String(), OccurredAt: at, EventID: id})
	if err != nil {
		t.Fatal(err)
	}
	return querytest.Event{Topic: events.TopicUsage, Envelope: e}
}

// decoded is evs as the inbox hands them to a handler.
func decoded(t *testing.T, evs ...querytest.Event) []*envelope.Decoded {
	t.Helper()
	reg := servicetest.Registry(query.Spec)
	ds := make([]*envelope.Decoded, len(evs))
	for i, e := range evs {
		raw, err := e.Envelope.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if ds[i], err = reg.Decode(raw); err != nil {
			t.Fatal(err)
		}
	}
	return ds
}

// handle runs the service's batch handler of the events' type (one type)
// on evs in one transaction, as the inbox does once its own dedup let them
// through (a redelivery after the inbox forgot the event, a redrive): for
// UsageAccepted, Project, then the facts and their rollups. It returns the
// handler's error (a duplicate item's included); the transaction rolls back
// on one.
func handle(t *testing.T, pool *pgxpool.Pool, evs ...querytest.Event) error {
	t.Helper()
	ds := decoded(t, evs...)
	h := app.New(app.Deps{}, app.Config{}).BatchHandlers()[ds[0].Envelope.EventType]
	return pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := h(t.Context(), tx, ds)
		return err
	})
}

// duplicate reports whether err says an item is a duplicate of an event
// projected before: the handler's verdict (an event of a month archived),
// or a unique violation of a partition's copy of projected_event_pkey,
// which the inbox decides a duplicate.
func duplicate(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505" && strings.HasPrefix(pgErr.TableName, "projected_event_") && strings.HasSuffix(pgErr.ConstraintName, "_pkey")
	}
	return err != nil && strings.Contains(err.Error(), "duplicate: projected_event_pkey")
}

// projectFacts runs the analytics' part of the handler alone on evs
// (app.ProjectFacts): usage_fact's own key is then the only guard.
func projectFacts(t *testing.T, pool *pgxpool.Pool, evs ...querytest.Event) {
	t.Helper()
	ds := decoded(t, evs...)
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return app.ProjectFacts(t.Context(), tx, ds) }); err != nil {
		t.Fatal(err)
	}
}

// rollups sums what the rollups hold: hourly rows, their facts and sums,
// and the distinct days' rows.
func rollups(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(t.Context(), `SELECT format('%s hourly rows, %s facts, sum %s; %s distinct days',
		(SELECT count(*) FROM usage_hourly), (SELECT COALESCE(sum(facts), 0) FROM usage_hourly),
		(SELECT COALESCE(sum(sum), 0) FROM usage_hourly), (SELECT count(*) FROM usage_distinct_day))`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func facts(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM usage_fact`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A database with usage facts migrates to facts by month: the facts stay
// (in the default partition) and one delivered again adds nothing, whether
// projected_event's key stops its event or only usage_fact's key in the
// default sees it; the upkeep makes the months after the one the old facts
// are in (each with its unique fact identity); a new fact goes to its
// month, and the same event again adds nothing there either.
func TestMigrateExistingFacts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newDB(t, 11)
	now := time.Now()
	// Today's handler writes summary_delta's events column (0012): the old
	// facts are handled with it added for them, one event at a time (so
	// each delta row is one event, as before 0012), and it is dropped
	// before migrating.
	if _, err := pool.Exec(ctx, `ALTER TABLE summary_delta ADD COLUMN events bigint NOT NULL DEFAULT 1`); err != nil {
		t.Fatal(err)
	}
	if err := handle(t, pool, querytest.Meter(t, "api", catalog.Sum, "")); err != nil {
		t.Fatal(err)
	}
	old := []querytest.Event{
		usage(t, monthparttest.MintedAt(now), "api", "old-1", "2", now.Add(-time.Hour)),
		usage(t, monthparttest.MintedAt(now), "api", "old-2", "3", now.Add(-time.Hour)),
	}
	for _, e := range old {
		if err := handle(t, pool, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE summary_delta DROP COLUMN events`); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // plans of the table with the column
	if err := pgmigrate.Up(pool.Config().ConnString(), migrations.Set); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // plans of the table as it was
	created, err := migrations.FactMonths.Ensure(ctx, pool, now)
	if err != nil {
		t.Fatal(err)
	}
	if cur := monthpart.MonthOf("usage_fact", now).Name; slices.Contains(created, cur) || len(created) != migrations.FactMonths.Ahead {
		t.Fatalf("created %v: want the %d months after %s only (its facts are in the default)", created, migrations.FactMonths.Ahead, cur)
	}
	before := rollups(t, pool)
	for _, e := range old {
		if got := monthparttest.PartitionOf(t, pool, migrations.FactMonths, e.Envelope.EventID); got != "usage_fact_default" {
			t.Fatalf("old fact %s in %q, want the default partition", e.Envelope.EventID, got)
		}
		if err := handle(t, pool, e); !duplicate(err) {
			t.Fatalf("old fact's event delivered again: %v, want a duplicate", err)
		}
	}
	projectFacts(t, pool, old...)
	if got := rollups(t, pool); got != before || facts(t, pool) != 2 {
		t.Fatalf("old facts delivered again: rollups %s (were %s), %d facts; want them unchanged", got, before, facts(t, pool))
	}

	at := monthpart.Start(now).AddDate(0, 1, 1)
	next := usage(t, monthparttest.MintedAt(at), "api", "new-1", "5", now)
	if err := handle(t, pool, next); err != nil {
		t.Fatal(err)
	}
	if got, want := monthparttest.PartitionOf(t, pool, migrations.FactMonths, next.Envelope.EventID),
		monthpart.MonthOf("usage_fact", at).Name; got != want {
		t.Fatalf("next month's fact in %q, want %q", got, want)
	}
	after := rollups(t, pool)
	if after == before {
		t.Fatal("a new fact added nothing to the rollups")
	}
	projectFacts(t, pool, next)
	if got := rollups(t, pool); got != after || facts(t, pool) != 3 {
		t.Fatalf("a new fact delivered again: rollups %s (were %s), %d facts; want them unchanged", got, after, facts(t, pool))
	}
}

// A month's facts are archived with its events: refused while the month is
// current, or while it holds a fact of a meter query has no definition of
// yet (the MeterDefined would roll up only the facts still here); archived
// once that meter is defined, both partitions detached. Its events then
// projected again are duplicates: no fact, no rollup. The rollups still
// answer whole hours of the archived facts; a query reading fact rows over
// their span is refused facts_archived, one over a range after it answers.
// The runtime's upkeep function neither detaches nor drops a month.
func TestArchiveFactMonth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newDB(t, 0)
	now := time.Now()
	month := monthpart.Start(now).AddDate(0, -2, 0)
	for _, tb := range []monthpart.Table{migrations.EventMonths, migrations.FactMonths} {
		if _, err := tb.Ensure(ctx, pool, month); err != nil {
			t.Fatal(err)
		}
	}
	if err := handle(t, pool, querytest.Meter(t, "api", catalog.Sum, "")); err != nil {
		t.Fatal(err)
	}
	in, next := month.Add(time.Hour), month.AddDate(0, 1, 1)
	api := usage(t, monthparttest.MintedAt(in), "api", "a-1", "3", month.Add(30*time.Minute))
	seats := usage(t, monthparttest.MintedAt(in), "seats", "s-1", "7", month.Add(40*time.Minute)) // no meter yet
	kept := usage(t, monthparttest.MintedAt(next), "api", "a-2", "4", next)
	if err := handle(t, pool, api, seats, kept); err != nil {
		t.Fatal(err)
	}
	// Their charges, rated the month after, on an issued invoice: what
	// projected_event's month needs to leave.
	for _, u := range []querytest.Event{api, seats} {
		if !project(t, pool, event{id: monthparttest.MintedAt(next), origin: u.Envelope.EventID, typ: "ChargeRated",
			period: "2026-09", currency: "USD", kind: "charged"}) {
			t.Fatal("a charge not stored")
		}
	}
	if !project(t, pool, event{id: monthparttest.MintedAt(now), typ: "InvoiceIssued", period: "2026-09", currency: "USD", kind: "invoiced"}) {
		t.Fatal("the invoice not stored")
	}
	archive := func(at time.Time) ([]string, error) {
		rows, err := pool.Query(ctx, `SELECT projected_event_archive($1)`, at)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if _, err := archive(now); sqlState(err) != "55000" {
		t.Fatalf("archive of this month: %v, want 55000", err)
	}
	for _, op := range []string{"detach", "drop"} {
		if _, err := pool.Exec(ctx, `SELECT usage_fact_months($1, $2)`, op, month.Format("200601")); err == nil {
			t.Fatalf("usage_fact_months did %s", op)
		}
	}
	if _, err := archive(month); sqlState(err) != "55000" {
		t.Fatalf("archive with a fact of a meter not defined: %v, want 55000", err)
	}
	if err := handle(t, pool, querytest.Meter(t, "seats", catalog.Sum, "")); err != nil {
		t.Fatal(err)
	}
	want := []string{monthpart.MonthOf("projected_event", month).Name, monthpart.MonthOf("usage_fact", month).Name}
	if got, err := archive(month.Add(48 * time.Hour)); err != nil || !slices.Equal(got, want) {
		t.Fatalf("archive: %v, %v; want %v", got, err, want)
	}
	for _, u := range []querytest.Event{api, seats} {
		if p := monthparttest.PartitionOf(t, pool, migrations.FactMonths, u.Envelope.EventID); p != "" {
			t.Fatalf("an archived fact is still in %s", p)
		}
	}
	if monthparttest.PartitionOf(t, pool, migrations.FactMonths, kept.Envelope.EventID) == "" {
		t.Fatal("the next month's fact left")
	}
	var spans int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_fact_archived WHERE partition = $1`, want[1]).Scan(&spans); err != nil || spans != 2 {
		t.Fatalf("%d spans of the archived month, %v; want 2 (api, seats)", spans, err)
	}

	before, n := rollups(t, pool), facts(t, pool)
	for _, u := range []querytest.Event{api, seats} {
		if err := handle(t, pool, u); !duplicate(err) {
			t.Fatalf("an archived fact's event projected again: %v, want a duplicate", err)
		}
	}
	if got := rollups(t, pool); got != before || facts(t, pool) != n {
		t.Fatalf("archived facts projected again: rollups %s (were %s), %d facts (were %d)", got, before, facts(t, pool), n)
	}

	r := app.New(app.Deps{Pool: pool}, app.Config{})
	read := func(from, to time.Time) (domain.UsageReport, error) {
		return r.Usage(ctx, domain.UsageQuery{TenantID: "t1", MeterCode: "api", From: from, To: to,
			WindowSize: domain.WindowDay, Zone: time.UTC}, 10, nil)
	}
	rep, err := read(month, month.AddDate(0, 0, 1)) // whole hours: the rollups
	if err != nil || len(rep.Rows) != 1 || !rep.Rows[0].Value.Equal(querytest.D("3")) {
		t.Fatalf("a whole day of the archived month: %+v, %v; want 3 from the rollups", rep.Rows, err)
	}
	var re *rule.Error
	if _, err := read(month.Add(15*time.Minute), month.AddDate(0, 0, 1)); !errors.As(err, &re) || re.Code != domain.CodeFactsArchived {
		t.Fatalf("fact rows over the archived span: %v, want %s", err, domain.CodeFactsArchived)
	}
	rep, err = read(next.Add(-15*time.Minute), next.AddDate(0, 0, 1)) // fact rows, after the span
	if err != nil || len(rep.Rows) != 1 || !rep.Rows[0].Value.Equal(querytest.D("4")) {
		t.Fatalf("fact rows after the archived span: %+v, %v; want 4", rep.Rows, err)
	}
}
