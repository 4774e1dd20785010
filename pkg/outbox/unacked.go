package outbox

import (
	"context"
	"fmt"
)

// The reads of what the broker has not acknowledged yet: rows pending or
// dead. Each reads the index that holds its rows in the order of its key:
// the pending entries one shard at a time, the dead letters by id.

// highestUnacknowledgedQuery: the highest id of the pending rows (the last of
// each shard's entries) and of the dead letters (the last in their index).
const highestUnacknowledgedQuery = `
SELECT GREATEST(
    (SELECT COALESCE(max(h.id), 0) FROM outbox_shard o CROSS JOIN LATERAL (
        SELECT p.id FROM outbox_pending p WHERE p.shard = o.shard
        ORDER BY p.id DESC LIMIT 1) h),
    COALESCE((SELECT id FROM outbox_event WHERE dead_at IS NOT NULL
              ORDER BY id DESC LIMIT 1), 0))`

// unacknowledgedThroughQuery: whether a shard's pending rows at or below id
// $1 hold one of type $2 to topic $3, or the dead letters do.
const unacknowledgedThroughQuery = `
SELECT EXISTS (SELECT 1 FROM outbox_shard o CROSS JOIN LATERAL (
               SELECT 1 FROM outbox_pending p
               CROSS JOIN LATERAL (SELECT event_type, topic FROM outbox_event e WHERE e.event_id = p.event_id LIMIT 1) e
               WHERE p.shard = o.shard AND p.id <= $1 AND e.event_type = $2 AND e.topic = $3
               ORDER BY p.id LIMIT 1) w)
    OR (SELECT id FROM outbox_event
        WHERE dead_at IS NOT NULL AND id <= $1 AND event_type = $2 AND topic = $3
        ORDER BY id LIMIT 1) IS NOT NULL`

// HighestUnacknowledged returns the highest id of the rows the broker has
// not acknowledged, pending or dead (0: none). Read under a lock that every
// append of the rows that matter takes too, it splits them: each appended
// before is acknowledged already or at or below it, each appended after
// takes a higher id.
func HighestUnacknowledged(ctx context.Context, q Querier) (int64, error) {
	var id int64
	if err := q.QueryRow(ctx, highestUnacknowledgedQuery).Scan(&id); err != nil {
		return 0, fmt.Errorf("read the highest unacknowledged outbox id: %w", err)
	}
	return id, nil
}

// UnacknowledgedThrough reports whether a row of eventType to topic at or
// below id through is not acknowledged by the broker yet, pending or dead.
func UnacknowledgedThrough(ctx context.Context, q Querier, through int64, eventType, topic string) (bool, error) {
	var waiting bool
	if err := q.QueryRow(ctx, unacknowledgedThroughQuery, through, eventType, topic).Scan(&waiting); err != nil {
		return false, fmt.Errorf("read unacknowledged outbox rows: %w", err)
	}
	return waiting, nil
}
