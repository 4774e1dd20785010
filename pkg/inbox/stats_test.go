package inbox_test

import (
	"testing"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestStatsCountUpToTheCap: more deferred events and quarantined messages
// than StatsCountCap read as StatsCountCap of each (a refresh of the
// gauges reads a bounded number of rows whatever the backlog); fewer read
// exact, and the oldest deferred age is still read.
func TestStatsCountUpToTheCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	insert := func(n int) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `
			INSERT INTO inbox_deferred (event_id, wait_key, reason, raw, payload_digest, event_type, tenant_id,
			                            aggregate_type, aggregate_id, aggregate_version, topic, partition, "offset", first_seen)
			SELECT gen_random_uuid(), 'k', 'missing_fact', '\x00', 'd', 'Stats', 't', 'a', 'id' || i, 1, 'stats.v1', 0, i,
			       now() - interval '1 hour'
			FROM generate_series(1, $1) i`, n); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), `
			INSERT INTO inbox_quarantine (raw_sha256, reason, raw, topic, partition, "offset")
			SELECT gen_random_uuid()::text, 'malformed', '\x00', 'stats.v1', 0, i
			FROM generate_series(1, $1) i`, n); err != nil {
			t.Fatal(err)
		}
	}
	insert(7)
	st, err := inbox.ReadStats(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deferred != 7 || st.Quarantined != 7 || st.OldestDeferredAge.Minutes() < 59 {
		t.Fatalf("stats %+v, want 7 deferred an hour old and 7 quarantined", st)
	}
	insert(inbox.StatsCountCap)
	if st, err = inbox.ReadStats(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if st.Deferred != inbox.StatsCountCap || st.Quarantined != inbox.StatsCountCap {
		t.Fatalf("stats %+v, want %d deferred and %d quarantined (the cap)", st, inbox.StatsCountCap, inbox.StatsCountCap)
	}
}
