package db

import (
	"context"
	"time"
)

// deferredUsageBefore counts a tenant's UsageAccepted waiting in the inbox
// (inbox_deferred, pkg/inbox's schema) that occurred before an instant: a
// close waits for them (decision 0014). Written by hand: the inbox's schema
// is not in billing's sqlc schema. The deferred set is small (facts waiting
// for a price schedule), read by tenant.
const deferredUsageBefore = `
SELECT count(*) FROM inbox_deferred
WHERE event_type = 'UsageAccepted' AND tenant_id = $1
  AND (convert_from(raw, 'UTF8')::jsonb ->> 'occurredAt')::timestamptz < $2`

// DeferredUsageBefore counts a tenant's deferred UsageAccepted that
// occurred before before.
func DeferredUsageBefore(ctx context.Context, q DBTX, tenantID string, before time.Time) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, deferredUsageBefore, tenantID, before).Scan(&n)
	return n, err
}
