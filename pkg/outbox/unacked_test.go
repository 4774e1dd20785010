package outbox_test

import (
	"fmt"
	"testing"

	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestUnacknowledged: the highest unacknowledged id is the highest pending
// row's or dead letter's, whatever its shard, and a row is waited for when
// it is pending or dead, of the type and topic asked, at or below the id.
func TestUnacknowledged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, outboxDB)
	check := func(wantHighest int64, through int64, eventType string, want bool) {
		t.Helper()
		highest, err := outbox.HighestUnacknowledged(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		waiting, err := outbox.UnacknowledgedThrough(ctx, pool, through, eventType, "things")
		if err != nil {
			t.Fatal(err)
		}
		if highest != wantHighest || waiting != want {
			t.Fatalf("highest %d, %s waiting through %d %v; want %d and %v", highest, eventType, through, waiting, wantHighest, want)
		}
	}
	check(0, 1000, "X", false)
	add := func(eventType string, shard int, state string) int64 {
		t.Helper()
		var id int64
		if err := pool.QueryRow(ctx, `
			WITH e AS (
				INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, dead_at)
				VALUES (gen_random_uuid(), 'things', 'k', $2, $1, '\x00', CASE WHEN $3 = 'dead' THEN now() END)
				RETURNING shard, id, event_id), p AS (
				INSERT INTO outbox_pending (shard, id, event_id) SELECT shard, id, event_id FROM e WHERE $3 = 'pending')
			SELECT id FROM e`, eventType, shard, state).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a := add("X", 3, "pending")
	b := add("Y", 60, "pending")
	c := add("X", 3, "sent")
	check(b, a-1, "X", false)
	check(b, a, "X", true)
	check(b, c, "Y", true)
	check(b, a, "Y", false)
	d := add("X", 7, "dead")
	check(d, c, "X", true)
	markSent(t, pool, "e.id = $1", a)
	check(d, c, "X", false)
	check(d, d, "X", true) // the dead letter waits for ever
	check(d, d, "Z", false)
	e := add("X", 12, "pending")
	check(e, d-1, "X", false)
}

// TestUnacknowledgedReadsNoPublishedRow: the two reads of the rows not
// acknowledged read none of a day's published rows, whether the day was
// never analyzed or analyzed while they were pending.
func TestUnacknowledgedReadsNoPublishedRow(t *testing.T) {
	t.Parallel()
	for _, analyzed := range []bool{false, true} {
		pool, part, _ := sentDay(t, 100_000, analyzed)
		readsNoRow(t, pool, part, fmt.Sprintf("the highest unacknowledged id (analyzed while pending: %v)", analyzed),
			outbox.HighestUnacknowledgedQuery)
		readsNoRow(t, pool, part, fmt.Sprintf("the unacknowledged rows through an id (analyzed while pending: %v)", analyzed),
			outbox.UnacknowledgedThroughQuery, 100_000, "Stats", "stats.v1")
	}
}
