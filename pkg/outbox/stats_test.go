package outbox_test

import (
	"testing"

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
			INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, dead_at)
			SELECT gen_random_uuid(), 'stats.v1', 'k' || i, i % 4, 'Stats', '\x00', CASE WHEN $2 THEN now() END
			FROM generate_series(1, $1) i`, n, dead); err != nil {
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
