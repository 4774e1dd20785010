package outbox_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestStatsCountUpToTheCap: a backlog of more pending rows and more dead
// letters than StatsCountCap reads as StatsCountCap of each, so a refresh
// of the gauges reads a bounded number of index entries whatever the
// backlog; a smaller one reads exact.
func TestStatsCountUpToTheCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, outboxDB)
	insert := func(n int, dead bool) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `
			WITH e AS (
				INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, dead_at)
				SELECT gen_random_uuid(), 'stats.v1', 'k' || i, i % 4, 'Stats', '\x00', CASE WHEN $2 THEN now() END
				FROM generate_series(1, $1) i
				RETURNING shard, id, event_id, dead_at)
			INSERT INTO outbox_pending (shard, id, event_id) SELECT shard, id, event_id FROM e WHERE dead_at IS NULL`, n, dead); err != nil {
			t.Fatal(err)
		}
	}
	insert(12, false)
	insert(3, true)
	st, err := outbox.ReadStats(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 12 || st.DeadLetters != 3 {
		t.Fatalf("stats %+v, want 12 pending and 3 dead letters", st)
	}
	insert(outbox.StatsCountCap, false)
	insert(outbox.StatsCountCap, true)
	if st, err = outbox.ReadStats(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if st.Pending != outbox.StatsCountCap || st.DeadLetters != outbox.StatsCountCap {
		t.Fatalf("stats %+v, want %d pending and %d dead letters (the cap)", st, outbox.StatsCountCap, outbox.StatsCountCap)
	}
}

// TestStatsReadNoPublishedRow: ReadStats reads the outbox through
// outbox_pending and the dead letters' partial index only, not the sent rows
// around them. A day of 100,000 rows, all sent, once had its dead letters
// counted by a Seq Scan of the day when it was never analyzed (as a day is
// for hours under load: autovacuum comes late), and its pending rows when it
// was analyzed before they were sent; every 5 s in each relay.
func TestStatsReadNoPublishedRow(t *testing.T) {
	t.Parallel()
	for _, analyzed := range []bool{false, true} {
		pool, part, _ := sentDay(t, 100_000, analyzed)
		readsNoRow(t, pool, part, fmt.Sprintf("ReadStats (analyzed while pending: %v)", analyzed),
			outbox.StatsQuery, outbox.StatsHead, outbox.StatsCountCap)
	}
}

// TestDropCheckReadsNoPublishedRow: DropParts's check of a day, all of whose
// rows are sent, reads none of them.
func TestDropCheckReadsNoPublishedRow(t *testing.T) {
	t.Parallel()
	for _, analyzed := range []bool{false, true} {
		pool, part, day := sentDay(t, 100_000, analyzed)
		readsNoRow(t, pool, part, fmt.Sprintf("the drop check (analyzed while pending: %v)", analyzed),
			outbox.DropCheck(part), monthpart.Bound(day), monthpart.Bound(day.Add(24*time.Hour)))
	}
}

// sentDay makes the partition of outbox_event of a day (today's), with
// autovacuum off, appends n pending rows to it, analyzes it and
// outbox_pending if analyzed, and marks the rows sent. It returns the pool,
// the partition's name and the day's start.
func sentDay(t *testing.T, n int, analyzed bool) (*pgxpool.Pool, string, time.Time) {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.NewPool(t, outboxDB)
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour)
	if _, err := outbox.EventParts.Ensure(ctx, pool, day); err != nil {
		t.Fatal(err)
	}
	part := outbox.EventParts.PartOf(day).Name
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`ALTER TABLE ` + part + ` SET (autovacuum_enabled = off)`)
	// Ids of the day (UUIDv7: its first 48 bits are the Unix milliseconds).
	exec(`ALTER TABLE outbox_pending SET (autovacuum_enabled = off)`)
	exec(`WITH e AS (
			INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope)
			SELECT (lpad(to_hex($1::bigint + g), 12, '0') || '7000800000000000' || lpad(to_hex(g), 4, '0'))::uuid,
			       'stats.v1', 'k' || g, g % 64, 'Stats', '\x00'
			FROM generate_series(1, $2::int) g
			RETURNING shard, id, event_id)
		INSERT INTO outbox_pending (shard, id, event_id) SELECT shard, id, event_id FROM e`, day.UnixMilli(), n)
	if analyzed {
		exec(`ANALYZE ` + part + `, outbox_pending`)
	}
	exec(`DELETE FROM outbox_pending`)
	return pool, part, day.Truncate(24 * time.Hour)
}

// readsNoRow fails unless the statement sql, run with args, reads no row of
// outbox_event and does not read the partition part by a Seq Scan (the
// other partitions are empty: a Seq Scan of one reads nothing).
func readsNoRow(t *testing.T, pool *pgxpool.Pool, part, what, sql string, args ...any) {
	t.Helper()
	var plan []map[string]any
	if err := pool.QueryRow(t.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var read float64
	var seq []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, _ := n["Relation Name"].(string); strings.HasPrefix(rel, "outbox_event") {
			loops, _ := n["Actual Loops"].(float64)
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			read += (rows + removed) * loops
			if n["Node Type"] == "Seq Scan" && rel == part {
				seq = append(seq, rel)
			}
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plan[0]["Plan"].(map[string]any))
	if read > 0 || len(seq) > 0 {
		raw, _ := json.MarshalIndent(plan, "", " ")
		t.Fatalf("%s read %v outbox rows (Seq Scans of %v) from a day with none pending and no dead letter:\n%s", what, read, seq, raw)
	}
}
