package inbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// evAt is a Noted event of tenant t1, aggregate type "thing", with a fresh
// origin and an event id minted at at.
func evAt(t testing.TB, at time.Time, aggregate string, version int64) envelope.Envelope {
	t.Helper()
	e, err := envelope.New(envelope.Meta{
		EventID: monthparttest.MintedAt(at), EventType: "Noted", SchemaVersion: 1, TenantID: "t1",
		AggregateType: "thing", AggregateID: aggregate, AggregateVersion: version,
		OccurredAt: at, Producer: "test",
	}, note{Origin: origin(aggregate)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// partitionOf is the partition of inbox_event holding the row of id ("" if none).
func partitionOf(t testing.TB, pool *pgxpool.Pool, id uuid.UUID) string {
	return monthparttest.PartitionOf(t, pool, inbox.EventParts, id)
}

// lastWeek is an hour before the current week of inbox_event began, with
// the partitions of that week and of the current one created.
func lastWeek(t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	last := inbox.EventParts.Span.Start(time.Now()).Add(-time.Hour)
	if _, err := inbox.EventParts.Ensure(t.Context(), pool, last); err != nil {
		t.Fatal(err)
	}
	return last
}

// An event decided last week is redelivered this week: its id leads to
// last week's partition, where its claim is, and it is a DUPLICATE.
func TestRedeliveryAfterTheWeekTurnedIsADuplicate(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	last := lastWeek(t, pool)
	e := evAt(t, last, "r", 1)
	wantOutcomes(t, decide(t, ib0(t), pool, raw(t, e)), "applied")
	if got, want := partitionOf(t, pool, e.EventID), inbox.EventParts.PartOf(last).Name; got != want {
		t.Fatalf("claim in %q, want last week's %q", got, want)
	}
	wantOutcomes(t, decide(t, ib0(t), pool, raw(t, e)), "duplicate")
	if got := effectVersions(t, pool, "r"); !slices.Equal(got, []int64{1}) {
		t.Fatalf("effects of r %v, want one", got)
	}
}

func ib0(t testing.TB) *inbox.Inbox { return newInbox(t, inbox.Options{}) }

// The aggregate slot is unique within a week; a second event claiming an
// applied version from another week is a DUPLICATE (version applied) all
// the same, in either order of weeks, and writes nothing; the next version,
// this week, finds its predecessor in last week's partition.
func TestSlotConflictAcrossWeeks(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := ib0(t)
	now := time.Now()
	last := lastWeek(t, pool)
	// x@1 last week, then another x@1 this week (another origin, so no
	// effect constraint stands in for the slot).
	wantOutcomes(t, decide(t, ib, pool, raw(t, evAt(t, last, "x", 1))), "applied")
	other := evAt(t, now, "x", 1)
	wantOutcomes(t, decide(t, ib, pool, raw(t, other)), "duplicate:version_already_applied")
	// y@1 this week, then another y@1 minted last week.
	wantOutcomes(t, decide(t, ib, pool, raw(t, evAt(t, now, "y", 1))), "applied")
	older := evAt(t, last, "y", 1)
	wantOutcomes(t, decide(t, ib, pool, raw(t, older)), "duplicate:version_already_applied")
	for _, a := range []string{"x", "y"} {
		if got := effectVersions(t, pool, a); !slices.Equal(got, []int64{1}) {
			t.Fatalf("effects of %s %v, want one", a, got)
		}
	}
	if partitionOf(t, pool, other.EventID) != "" || partitionOf(t, pool, older.EventID) != "" {
		t.Fatal("the refused events keep a claim")
	}
	wantOutcomes(t, decide(t, ib, pool, raw(t, evAt(t, now, "x", 2))), "applied")
}

// A minted aggregate (Options.MintedAggregates) minted half an hour into
// this week, whose slot an event minted half an hour before the week began
// holds: clocks a day apart at most (MintSkew), the claim looks for the
// holder in last week too, and another event of the slot this week is a
// DUPLICATE. (With no skew allowed it would look from the aggregate's own
// time on, miss the holder, and apply the slot twice.)
func TestMintedSlotHolderFoundAcrossTheWeekWithinTheSkew(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{MintedAggregates: []string{"thing"}})
	last := lastWeek(t, pool) // an hour before this week began
	aggregate := monthparttest.MintedAt(last.Add(90 * time.Minute)).String()
	holder := evAt(t, last.Add(30*time.Minute), aggregate, 1)
	wantOutcomes(t, decide(t, ib, pool, raw(t, holder)), "applied")
	if got, want := partitionOf(t, pool, holder.EventID), inbox.EventParts.PartOf(last).Name; got != want {
		t.Fatalf("holder claimed in %q, want last week's %q", got, want)
	}
	other := evAt(t, last.Add(2*time.Hour), aggregate, 1)
	wantOutcomes(t, decide(t, ib, pool, raw(t, other)), "duplicate:version_already_applied")
	if got := effectVersions(t, pool, aggregate); !slices.Equal(got, []int64{1}) {
		t.Fatalf("effects of %s %v, want one", aggregate, got)
	}
}

// The claim of events of minted aggregates minted with them looks for
// holders of their slots in no week before their own (HolderSince), where
// the same events of an aggregate type not minted probe every past week: the
// steady state's three past weeks were half of a claim's time
// (BenchmarkDecideSteadyState).
func TestMintedClaimProbesNoPastWeek(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ctx := t.Context()
	last := lastWeek(t, pool)
	// A row in last week's partition, so its slot index is not empty.
	wantOutcomes(t, decide(t, ib0(t), pool, raw(t, evAt(t, last, "old", 1))), "applied")
	lastPart := inbox.EventParts.PartOf(last).Name
	// Events minted two days into this week, with their aggregates.
	at := inbox.EventParts.Span.Start(time.Now()).Add(48 * time.Hour)
	const n = 20
	ids, aggIDs := make([]uuid.UUID, n), make([]string, n)
	los, his := make([]uuid.UUID, n), make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = monthparttest.MintedAt(at.Add(time.Duration(i) * time.Millisecond))
		aggIDs[i] = monthparttest.MintedAt(at.Add(time.Duration(i) * time.Millisecond)).String()
		los[i], his[i] = inbox.EventParts.Span.Around(ids[i])
	}
	for _, minted := range []bool{true, false} {
		sinces := make([]uuid.UUID, n)
		for i := range sinces {
			sinces[i] = inbox.HolderSince(aggIDs[i], minted)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []map[string]any
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+inbox.ClaimStatement,
			ids, repeat("digest", n), repeat("Noted", n), repeat("t1", n), repeat("thing", n), aggIDs, ones(n),
			los, his, sinces).Scan(&plan)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatal(err)
		}
		probes := 0.0
		var walk func(node map[string]any)
		walk = func(node map[string]any) {
			if node["Relation Name"] == lastPart {
				loops, _ := node["Actual Loops"].(float64)
				probes += loops
			}
			children, _ := node["Plans"].([]any)
			for _, c := range children {
				walk(c.(map[string]any))
			}
		}
		walk(plan[0]["Plan"].(map[string]any))
		switch {
		case minted && probes != 0:
			t.Errorf("minted aggregates: the claim read last week's partition %v times, want none", probes)
		case !minted && probes < n:
			t.Errorf("aggregates not minted: the claim read last week's partition %v times, want once per event (%d)", probes, n)
		}
	}
}

// Dropping a week past the retention carries the newest version of a kept
// aggregate type into the default partition, so the next version, months
// later, finds its predecessor; older versions go with the
// week. A week holding a row decided within the retention is kept.
// (q@1 is the newest of q: carried too.)
func TestDropWeekKeepsTheNewestVersion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	ib := ib0(t)
	now := time.Now()
	old := inbox.EventParts.Span.Start(now).AddDate(0, 0, -35).Add(time.Hour) // five weeks ago
	late := old.AddDate(0, 0, 7)                                              // four weeks ago
	if _, err := inbox.EventParts.Ensure(ctx, pool, old); err != nil {        // old's week and late's
		t.Fatal(err)
	}
	wantOutcomes(t, decide(t, ib, pool,
		raw(t, evAt(t, old, "p", 1)), raw(t, evAt(t, old, "p", 2)), raw(t, evAt(t, old, "q", 1)),
		raw(t, evAt(t, late, "l", 1))),
		"applied", "applied", "applied", "applied")
	if _, err := pool.Exec(ctx, `UPDATE inbox_event SET applied_at = $1 WHERE aggregate_id <> 'l'`, old); err != nil {
		t.Fatal(err)
	}
	left := func() []string {
		rows, err := pool.Query(ctx, `SELECT aggregate_id || '@' || aggregate_version FROM inbox_event ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	cutoff := now.Add(-14 * 24 * time.Hour)
	dropped, n, err := inbox.DropParts(ctx, pool, cutoff, []string{"thing"})
	if err != nil {
		t.Fatal(err)
	}
	oldName, lateName := inbox.EventParts.PartOf(old).Name, inbox.EventParts.PartOf(late).Name
	if !slices.Contains(dropped, oldName) || slices.Contains(dropped, lateName) || n != 3 {
		t.Fatalf("dropped %v (%d rows), want %s (3 rows) and not %s, decided just now", dropped, n, oldName, lateName)
	}
	if got := left(); !slices.Equal(got, []string{"l@1", "p@2", "q@1"}) {
		t.Fatalf("left %v, want the newest versions p@2 and q@1 carried over, and l@1", got)
	}
	var names []string
	parts, err := inbox.EventParts.Parts(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		names = append(names, p.Name)
	}
	if slices.Contains(names, oldName) || !slices.Contains(names, lateName) {
		t.Fatalf("partitions left %v", names)
	}
	wantOutcomes(t, decide(t, ib, pool, raw(t, evAt(t, now, "p", 3))), "applied")
}

// A database holding the inbox as it was before partitioning (decided rows,
// a deferred event) migrates: nothing is lost, a redelivery is still a
// DUPLICATE, a slot conflict still refused, the deferred event still wakes;
// the week whose rows the old table holds stays in the default partition,
// the week after it gets a partition.
func TestMigrationToMonthsKeepsEveryDecision(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	old := monthparttest.Before(t, inbox.Migrations, 5)
	url := pgtest.NewDB(t, pgtest.Template{Name: "inbox-before-months", Migrate: func(ctx context.Context, databaseURL string) error {
		if err := pgmigrate.Up(databaseURL, old); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, testSchema)
		return err
	}})
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ib := ib0(t)
	if got := count(t, pool, `SELECT count(*) FROM pg_partitioned_table`); got != 0 {
		t.Fatal("the old schema is already partitioned")
	}
	now := time.Now()
	a1, b1, b3 := ev(t, "Noted", 1, "a", 1, note{Origin: origin("a")}), ev(t, "Noted", 1, "b", 1, note{Origin: origin("b")}),
		ev(t, "Noted", 1, "b", 3, note{Origin: origin("b")})
	wantOutcomes(t, decide(t, ib, pool, raw(t, a1), raw(t, b1), raw(t, b3)), "applied", "applied", "deferred:version_gap")

	if err := inbox.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	created, err := inbox.EnsureParts(ctx, pool, now)
	if err != nil {
		t.Fatal(err)
	}
	cur := inbox.EventParts.PartOf(now).Name
	if slices.Contains(created, cur) || len(created) != inbox.EventParts.Ahead {
		t.Fatalf("created %v: want the %d weeks after %s only", created, inbox.EventParts.Ahead, cur)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_event_default`); got != 2 {
		t.Fatalf("%d rows in the default partition, want the 2 decided", got)
	}
	wantOutcomes(t, decide(t, ib, pool, raw(t, a1)), "duplicate")
	wantOutcomes(t, decide(t, ib, pool, raw(t, evAt(t, now, "a", 1))), "duplicate:version_already_applied")
	wantOutcomes(t, decide(t, ib, pool, raw(t, evAt(t, now, "b", 2))), "applied", "applied+woken")
	// An event minted next week (a clock ahead) goes to its partition.
	next := evAt(t, inbox.EventParts.Span.Start(now).AddDate(0, 0, 8), "c", 1)
	wantOutcomes(t, decide(t, ib, pool, raw(t, next)), "applied")
	if got, want := partitionOf(t, pool, next.EventID), inbox.EventParts.PartOf(next.OccurredAt).Name; got != want {
		t.Fatalf("next week's event in %q, want %q", got, want)
	}
	if got := effectVersions(t, pool, "b"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("effects of b %v", got)
	}
	if got := effectVersions(t, pool, "a"); !slices.Equal(got, []int64{1}) {
		t.Fatalf("effects of a %v", got)
	}
}

// ones is n versions 1.
func ones(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// Each week's aggregate slot leads with the aggregate id (migration 0007):
// the aggregates that come once per fact have UUIDv7 ids, so the index grows
// at its right end however many tenants interleave, where led by the tenant
// it had one place of insertion per tenant.
func TestWeekSlotLeadsWithTheAggregateID(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	part := inbox.EventParts.PartOf(lastWeek(t, pool)).Name
	var def string
	if err := pool.QueryRow(t.Context(), `SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
		WHERE i.indrelid = $1::regclass AND i.indisunique AND NOT i.indisprimary`, part).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "(aggregate_id, aggregate_type, tenant_id, aggregate_version)") {
		t.Fatalf("the slot of %s is %s, want it led by aggregate_id", part, def)
	}
}
