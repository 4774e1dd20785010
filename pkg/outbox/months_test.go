package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// mintedAt gives evs event ids minted at t, keeping their order.
func mintedAt(evs []envelope.Envelope, t time.Time) []envelope.Envelope {
	out := slices.Clone(evs)
	for i := range out {
		out[i].EventID = monthparttest.MintedAt(t)
	}
	return out
}

// A day past the retention whose rows were all sent is dropped whole; one
// holding a dead letter (or a pending row) is kept, reported held, until the
// dead letter is redriven and sent.
func TestDropPartsKeepsADayHoldingADeadLetter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, outboxDB)
	now := time.Now()
	a := monthpart.Start(now).AddDate(0, -3, 0).Add(time.Hour)
	b := a.AddDate(0, 0, 1)
	if _, err := outbox.EventParts.Ensure(ctx, pool, a); err != nil { // a's day, b's and one more
		t.Fatal(err)
	}
	inA, inB := mintedAt(newEvents(t, 3, 3), a), mintedAt(newEvents(t, 2, 2), b)
	appendEvents(t, pool, "t", append(inA, inB...))
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	markSent(t, pool, "true")
	exec(`UPDATE outbox_event SET dead_at = now() - interval '40 days' WHERE event_id = $1`, inB[0].EventID)

	d, err := outbox.DropParts(ctx, pool, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nameA, nameB := outbox.EventParts.PartOf(a).Name, outbox.EventParts.PartOf(b).Name
	// (The day after b's, empty and ended long ago, goes too.)
	if !slices.Contains(d.Parts, nameA) || slices.Contains(d.Parts, nameB) || d.Rows != 3 || !slices.Equal(d.Held, []string{nameB}) {
		t.Fatalf("dropped %+v, want %s (3 rows) dropped and %s held", d, nameA, nameB)
	}
	if got := count(t, pool, `SELECT count(*) FROM outbox_event`); got != 2 {
		t.Fatalf("%d rows left, want day b's 2", got)
	}
	if ok, err := outbox.RedriveDeadLetter(ctx, pool, inB[0].EventID); err != nil || !ok {
		t.Fatalf("redrive: %v %v", ok, err)
	}
	if d, err := outbox.DropParts(ctx, pool, now, 24*time.Hour); err != nil || len(d.Parts) != 0 || !slices.Equal(d.Held, []string{nameB}) {
		t.Fatalf("with the redriven row pending: %+v %v", d, err)
	}
	markSent(t, pool, "e.event_id = $1", inB[0].EventID)
	if d, err := outbox.DropParts(ctx, pool, now, 24*time.Hour); err != nil || !slices.Equal(d.Parts, []string{nameB}) {
		t.Fatalf("once sent: %+v %v", d, err)
	}
}

func count(t testing.TB, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A database holding the outbox as it was before partitioning (published
// rows and a backlog of pending ones) migrates: the backlog is delivered,
// in order per key, none lost or sent twice, with the events appended after
// the migration (ids after the old ones).
func TestMigrationToMonthsDeliversTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	old := monthparttest.Before(t, outbox.Migrations, 2)
	url := pgtest.NewDB(t, pgtest.Template{Name: "outbox-before-months", Migrate: func(_ context.Context, databaseURL string) error {
		return pgmigrate.Up(databaseURL, old)
	}})
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 3)
	published, backlog := newEvents(t, 5, 5), newEvents(t, 300, 20)
	appendBefore(t, pool, topic, published)
	if _, err := pool.Exec(ctx, `UPDATE outbox_event SET published_at = now()`); err != nil {
		t.Fatal(err)
	}
	appendBefore(t, pool, topic, backlog)

	if err := outbox.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	if got := count(t, pool, `SELECT count(*) FROM pg_partitioned_table`); got != 1 {
		t.Fatal("outbox_event is not partitioned")
	}
	if got := count(t, pool, `SELECT count(*) FROM outbox_event_default`); got != 305 {
		t.Fatalf("%d rows in the default partition, want the 305 appended", got)
	}
	// The relay creates the days after this one at its start (this day's
	// rows are in the default partition: it stays there); the next appends
	// of the same keys come after the backlog.
	more := newEvents(t, 40, 20)
	for i := range more {
		more[i].PartitionKey, more[i].AggregateID = backlog[i%20].PartitionKey, backlog[i%20].AggregateID
		more[i].AggregateVersion = backlog[len(backlog)-20+i%20].AggregateVersion + int64(1+i/20)
	}
	reg := prometheus.NewRegistry()
	_, stop := startRelays(t, pool, 1, outbox.Config{Brokers: brokers, Registerer: reg})
	waitFor(t, 30*time.Second, "days created", func() (bool, string) {
		n := count(t, pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_event'::regclass`)
		return n == 1+outbox.EventParts.Ahead, ""
	})
	appendEvents(t, pool, topic, more)
	waitDrained(t, pool, 60*time.Second)
	stop()
	ids := make([]uuid.UUID, len(more))
	for i, e := range more {
		ids[i] = e.EventID
	}
	var newest, oldest int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT max(id) FROM outbox_event WHERE NOT event_id = ANY($1)),
		(SELECT min(id) FROM outbox_event WHERE event_id = ANY($1))`, ids).Scan(&newest, &oldest); err != nil {
		t.Fatal(err)
	}
	if oldest <= newest {
		t.Fatalf("an event appended after the migration has id %d, not after the old rows' %d", oldest, newest)
	}
	rep := checkDelivery(append(backlog, more...), readTopic(t, brokers, topic))
	if rep.Lost != 0 || rep.Duplicates != 0 || rep.Reordered != 0 || rep.Unknown != 0 {
		t.Fatalf("delivery: %v", rep)
	}
	// A day's partition takes the appends of its ids.
	tomorrow := outbox.EventParts.Span.Start(time.Now()).Add(25 * time.Hour)
	next := mintedAt(newEvents(t, 1, 1), tomorrow)
	appendEvents(t, pool, topic, next)
	var part string
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM outbox_event WHERE event_id = $1`, next[0].EventID).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if want := outbox.EventParts.PartOf(tomorrow).Name; part != want {
		t.Fatalf("tomorrow's event in %s, want %s", part, want)
	}
}

// TestClaimReadsOnlyTheIdsDays: the claim, planned once for every round as
// a prepared statement is (a generic plan), reads each pending entry's row
// in the day's partition its id is in, not in every day's index and the
// default's.
func TestClaimReadsOnlyTheIdsDays(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, outboxDB)
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour)
	if _, err := outbox.EventParts.Ensure(ctx, pool, day); err != nil { // its day and two after it
		t.Fatal(err)
	}
	evs := mintedAt(newEvents(t, 500, 50), day)
	appendEvents(t, pool, "t", evs)
	owner := uuid.Must(uuid.NewV7())
	if _, err := pool.Exec(ctx, `UPDATE outbox_shard SET owner = $1, lease_until = now() + interval '1 hour'`, owner); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A statement prepared in SQL, its parameters given as literals, so that
	// the plan is the generic one.
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan;
		PREPARE claim(smallint[], int, uuid) AS `+outbox.ClaimStatement); err != nil {
		t.Fatal(err)
	}
	shards := make([]string, outbox.NumShards)
	for i := range shards {
		shards[i] = fmt.Sprint(i)
	}
	var plan []map[string]any
	if err := conn.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim('{%s}', 500, '%s')`,
		strings.Join(shards, ","), owner), pgx.QueryExecModeSimpleProtocol).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	read := map[string]float64{}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, _ := n["Relation Name"].(string); strings.HasPrefix(rel, "outbox_event") {
			loops, _ := n["Actual Loops"].(float64)
			read[rel] += loops
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	root := plan[0]["Plan"].(map[string]any)
	walk(root)
	want := outbox.EventParts.PartOf(day).Name
	for rel, loops := range read {
		if (rel == want) != (loops > 0) {
			raw, _ := json.MarshalIndent(plan, "", " ")
			t.Fatalf("the claim read %v (loops per partition), want %s alone:\n%s", read, want, raw)
		}
	}
	if got, _ := root["Actual Rows"].(float64); got != float64(len(evs)) {
		t.Fatalf("claimed %v rows, want %d", got, len(evs))
	}
}

// appendBefore writes evs as pending rows of an outbox at a migration
// before 0004, which had no outbox_pending: a row was pending while its
// published_at was NULL.
func appendBefore(t testing.TB, pool *pgxpool.Pool, topic string, evs []envelope.Envelope) {
	t.Helper()
	for _, e := range evs {
		body, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), `
			INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope)
			VALUES ($1, $2, $3, $4, $5, $6)`,
			e.EventID, topic, e.PartitionKey, outbox.Shard(e.PartitionKey), e.EventType, body); err != nil {
			t.Fatal(err)
		}
	}
}
