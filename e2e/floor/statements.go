package floor

// The outbox's and the inbox's statements, copied from pkg/outbox and
// pkg/inbox (unexported there); the floor must change when they do.

// appendSQL is pkg/outbox appendSQL (outbox.go): one statement per
// append, every event of a run of one topic.
const appendSQL = `
		INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope)
		SELECT e.event_id, $1, e.partition_key, e.shard, e.event_type, e.envelope
		FROM unnest($2::uuid[], $3::text[], $4::smallint[], $5::text[], $6::bytea[])
		     WITH ORDINALITY AS e(event_id, partition_key, shard, event_type, envelope, n)
		ORDER BY e.n`

// claimSQL is pkg/outbox claimQuery (send.go): the oldest pending rows of
// each shard the relay holds, a batch in all.
const claimSQL = `
SELECT e.id, e.event_id, e.topic, e.partition_key, e.event_type, e.shard, e.envelope, e.created_at, e.attempts
FROM unnest($1::smallint[]) WITH ORDINALITY AS s(shard, n)
JOIN outbox_shard o ON o.shard = s.shard AND o.owner = $3 AND o.lease_until > now()
CROSS JOIN LATERAL (
    SELECT id, event_id, topic, partition_key, event_type, shard, envelope, created_at, attempts
    FROM outbox_event
    WHERE shard = s.shard AND published_at IS NULL AND dead_at IS NULL
    ORDER BY id
    LIMIT $2
) e
ORDER BY s.n, e.id
LIMIT $2`

// markSQL is pkg/outbox markPublished (send.go), fenced on the owner.
const markSQL = `
		UPDATE outbox_event e SET published_at = now()
		FROM outbox_shard o
		WHERE e.event_id = ANY($1) AND o.shard = e.shard AND o.owner = $2 AND e.published_at IS NULL`

// inboxClaimSQL is pkg/inbox queueClaims (decide.go): the claim, with the
// digests of the events it did not claim and another holder of each
// event's aggregate slot outside the ids about its own (in any other week),
// in one statement. The predecessor lookup is not sent: every event of a
// fact is at version 1. Neither is readUnseen's: no delivery here is
// concurrent.
const inboxClaimSQL = `
		WITH k AS (
		    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
		                         $8::uuid[], $9::uuid[])
		         WITH ORDINALITY AS c(event_id, payload_digest, event_type, tenant_id,
		                              aggregate_type, aggregate_id, aggregate_version, lo, hi, n)
		), claim AS (
		    INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id,
		                             aggregate_type, aggregate_id, aggregate_version)
		    SELECT k.event_id, k.payload_digest, k.event_type, k.tenant_id,
		           k.aggregate_type, k.aggregate_id, k.aggregate_version
		    FROM k
		    ORDER BY k.n
		    ON CONFLICT DO NOTHING
		    RETURNING event_id
		)
		SELECT k.event_id, claim.event_id IS NOT NULL,
		       CASE WHEN claim.event_id IS NULL THEN
		           (SELECT e.payload_digest FROM inbox_event e WHERE e.event_id = k.event_id) END,
		       EXISTS (SELECT 1 FROM inbox_event e
		               WHERE e.tenant_id = k.tenant_id AND e.aggregate_type = k.aggregate_type
		                 AND e.aggregate_id = k.aggregate_id AND e.aggregate_version = k.aggregate_version
		                 AND e.event_id < k.lo)
		       OR EXISTS (SELECT 1 FROM inbox_event e
		                  WHERE e.tenant_id = k.tenant_id AND e.aggregate_type = k.aggregate_type
		                    AND e.aggregate_id = k.aggregate_id AND e.aggregate_version = k.aggregate_version
		                    AND e.event_id >= k.hi)
		FROM k LEFT JOIN claim ON claim.event_id = k.event_id`

// inboxDeferredSQL is the lookup of pkg/inbox read (decide.go): the run's
// event ids in inbox_deferred.
const inboxDeferredSQL = `
		SELECT k.id, (SELECT d.payload_digest FROM inbox_deferred d WHERE d.event_id = k.id)
		FROM unnest($1::uuid[]) AS k(id)`

// savepoint is pkg/inbox's savepoint name.
const savepoint = "inbox_decide"
