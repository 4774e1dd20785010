-- Webhook endpoints and delivery intents (migration 0003). Times are the
-- database's clock, so several workers on several machines agree on them.

-- name: LockTenantEndpoints :exec
-- LockTenantEndpoints serialises the endpoint changes of one tenant (the
-- count of active endpoints is checked before an insert).
SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoint/' || @tenant_id::text, 0));

-- name: CountActiveEndpoints :one
SELECT count(*) FROM webhook_endpoint WHERE tenant_id = @tenant_id AND deleted_at IS NULL;

-- name: InsertEndpoint :one
INSERT INTO webhook_endpoint (endpoint_id, tenant_id, url, secret, created_by)
VALUES (@endpoint_id, @tenant_id, @url, @secret, @created_by)
RETURNING created_at;

-- name: ListEndpoints :many
-- ListEndpoints reads a page of a tenant's active endpoints after
-- endpoint id @after (the zero id: from the first), in id (creation) order.
SELECT endpoint_id, url, created_by, created_at FROM webhook_endpoint
WHERE tenant_id = @tenant_id AND deleted_at IS NULL AND endpoint_id > @after
ORDER BY endpoint_id LIMIT @max_rows;

-- name: DeleteEndpoint :execrows
UPDATE webhook_endpoint SET deleted_at = now()
WHERE tenant_id = @tenant_id AND endpoint_id = @endpoint_id AND deleted_at IS NULL;

-- name: FailOpenIntentsOfEndpoint :execrows
-- FailOpenIntentsOfEndpoint ends the intents of a deleted endpoint that
-- were not delivered: nobody is to be told any more.
UPDATE webhook_intent SET status = 'failed', lease_owner = NULL, lease_expires_at = NULL,
    last_error = 'endpoint_deleted', finished_at = clock_timestamp()
WHERE endpoint_id = @endpoint_id AND status IN ('pending', 'leased');

-- name: SecretsToReseal :many
-- SecretsToReseal reads up to @max_rows endpoints whose stored secret is
-- not sealed with the current key (it does not start with @current_prefix):
-- plaintext ones, and those sealed with an older key.
SELECT endpoint_id, secret FROM webhook_endpoint
WHERE NOT starts_with(secret, @current_prefix::text)
ORDER BY endpoint_id LIMIT @max_rows;

-- name: ResealSecret :execrows
-- ResealSecret replaces an endpoint's stored secret if it is still @old
-- (another worker may have resealed it meanwhile).
UPDATE webhook_endpoint SET secret = @new WHERE endpoint_id = @endpoint_id AND secret = @old;

-- name: ActiveEndpointIDs :many
-- ActiveEndpointIDs are the endpoints an event of the tenant is told to.
SELECT endpoint_id FROM webhook_endpoint WHERE tenant_id = @tenant_id AND deleted_at IS NULL ORDER BY endpoint_id;

-- name: InsertIntents :execrows
-- InsertIntents writes intents, the same key for the same endpoint at most
-- once (webhook_intent_key): a second write of one is nothing.
INSERT INTO webhook_intent (intent_id, endpoint_id, tenant_id, idempotency_key, event_id, event_type, body, expires_at)
SELECT unnest(@intent_ids::uuid[]), unnest(@endpoint_ids::uuid[]), @tenant_id::text, unnest(@idempotency_keys::text[]),
       unnest(@event_ids::uuid[]), unnest(@event_types::text[]), unnest(@bodies::text[]),
       now() + make_interval(secs => @ttl_seconds::float8)
ON CONFLICT ON CONSTRAINT webhook_intent_key DO NOTHING;

-- name: ClaimIntents :many
-- ClaimIntents leases up to @max_rows due intents to @owner: pending ones
-- whose not_before has come, and leased ones whose lease expired (their
-- worker died or hangs), neither expired. Each claim is an attempt. Rows
-- another worker is claiming are skipped.
--
-- Never an intent of a deleted endpoint: Delete fails the intents it sees,
-- but an issuing transaction open across the delete commits intents it
-- wrote for the endpoint after; those are failed here (endpoint_deleted)
-- when met among the candidates, instead of being delivered.
--
-- Fairly: of the @scan_rows oldest due intents (tenants with no room left
-- left out), each endpoint's oldest first, then each tenant's, taken round
-- by round (every tenant's first, then every tenant's second, ...), at
-- most @tenant_room per tenant, less for the tenants named in @tenants
-- (their room in @rooms: the worker's deliveries of theirs still in
-- flight). So one tenant with many intents, or endpoints that hang, takes
-- at most its room of a worker's slots, and the others' intents go first.
WITH rooms AS (
    SELECT unnest(@tenants::text[]) AS t, unnest(@rooms::int[]) AS room
), candidates AS (
    SELECT w.intent_id, w.tenant_id, w.endpoint_id, w.not_before, (e.deleted_at IS NOT NULL) AS endpoint_deleted
    FROM webhook_intent w JOIN webhook_endpoint e ON e.endpoint_id = w.endpoint_id
    WHERE ((w.status = 'pending' AND w.not_before <= now()) OR (w.status = 'leased' AND w.lease_expires_at <= now()))
      AND w.expires_at > now()
      AND w.tenant_id NOT IN (SELECT rooms.t FROM rooms WHERE rooms.room <= 0)
    ORDER BY w.not_before
    LIMIT @scan_rows
), orphans AS (
    UPDATE webhook_intent o
    SET status = 'failed', lease_owner = NULL, lease_expires_at = NULL, last_error = 'endpoint_deleted',
        finished_at = clock_timestamp()
    FROM (SELECT w.intent_id FROM webhook_intent w JOIN candidates c ON c.intent_id = w.intent_id
          WHERE c.endpoint_deleted FOR UPDATE OF w SKIP LOCKED) gone
    WHERE o.intent_id = gone.intent_id
      AND (o.status = 'pending' OR (o.status = 'leased' AND o.lease_expires_at <= now()))
    RETURNING o.intent_id
), by_endpoint AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.endpoint_id ORDER BY c.not_before) AS endpoint_rank
    FROM candidates c WHERE NOT c.endpoint_deleted
), ranked AS (
    SELECT b.intent_id, b.not_before,
           row_number() OVER (PARTITION BY b.tenant_id ORDER BY b.endpoint_rank, b.not_before) AS tenant_rank,
           coalesce((SELECT rooms.room FROM rooms WHERE rooms.t = b.tenant_id), @tenant_room::int) AS room
    FROM by_endpoint b
), due AS (
    SELECT w.intent_id FROM webhook_intent w JOIN ranked r ON r.intent_id = w.intent_id
    WHERE r.tenant_rank <= r.room
      AND ((w.status = 'pending' AND w.not_before <= now()) OR (w.status = 'leased' AND w.lease_expires_at <= now()))
    ORDER BY r.tenant_rank, r.not_before
    LIMIT @max_rows
    FOR UPDATE OF w SKIP LOCKED
)
UPDATE webhook_intent i
SET status = 'leased', lease_owner = @owner::uuid, lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
    attempts = i.attempts + 1, first_attempt_at = coalesce(i.first_attempt_at, clock_timestamp()),
    last_attempt_at = clock_timestamp()
FROM due, webhook_endpoint e
WHERE i.intent_id = due.intent_id AND e.endpoint_id = i.endpoint_id AND e.deleted_at IS NULL
RETURNING i.intent_id, i.tenant_id, i.endpoint_id, i.idempotency_key, i.event_type, i.body, i.attempts, e.url, e.secret,
    extract(epoch FROM clock_timestamp() - i.created_at)::float8 AS age_seconds;

-- name: RecordAccepted :execrows
-- RecordAccepted records a 2xx, fenced on the lease: a worker whose lease
-- was taken over records nothing.
UPDATE webhook_intent
SET status = 'accepted', lease_owner = NULL, lease_expires_at = NULL, last_status_code = @status_code::int,
    response_ref = sqlc.narg(response_ref), last_error = NULL, finished_at = clock_timestamp()
WHERE intent_id = @intent_id AND lease_owner = @owner::uuid AND status = 'leased';

-- name: RecordFailed :execrows
-- RecordFailed records a permanent refusal, fenced on the lease.
UPDATE webhook_intent
SET status = 'failed', lease_owner = NULL, lease_expires_at = NULL, last_status_code = sqlc.narg(status_code),
    response_ref = sqlc.narg(response_ref), last_error = @last_error::text, finished_at = clock_timestamp()
WHERE intent_id = @intent_id AND lease_owner = @owner::uuid AND status = 'leased';

-- name: RecordRetry :one
-- RecordRetry schedules the next attempt @delay_seconds from now, but not
-- after expires_at (the intent then expires instead of being tried late),
-- fenced on the lease. It returns the new status (none: the lease was lost).
UPDATE webhook_intent
SET status = CASE WHEN clock_timestamp() >= expires_at THEN 'expired' ELSE 'pending' END,
    finished_at = CASE WHEN clock_timestamp() >= expires_at THEN clock_timestamp() END,
    not_before = least(clock_timestamp() + make_interval(secs => @delay_seconds::float8), expires_at),
    lease_owner = NULL, lease_expires_at = NULL, last_status_code = sqlc.narg(status_code),
    last_error = @last_error::text
WHERE intent_id = @intent_id AND lease_owner = @owner::uuid AND status = 'leased'
RETURNING status, attempts;

-- name: ExpireIntents :many
-- ExpireIntents ends up to @max_rows intents not accepted by their
-- expires_at (pending, or leased by a worker whose lease ran out): they wait
-- in the operator's queue.
WITH due AS (
    SELECT w.intent_id FROM webhook_intent w
    WHERE (w.status = 'pending' OR (w.status = 'leased' AND w.lease_expires_at <= now())) AND w.expires_at <= now()
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_intent i
SET status = 'expired', lease_owner = NULL, lease_expires_at = NULL, finished_at = clock_timestamp(),
    last_error = coalesce(i.last_error, 'expired before any answer')
FROM due WHERE i.intent_id = due.intent_id
RETURNING i.attempts;

-- name: PurgeEnded :execrows
-- PurgeEnded deletes up to @max_rows intents that ended long enough ago:
-- accepted more than @accepted_seconds ago, failed or expired more than
-- @failed_seconds ago (an operator may retry those until then). Pending
-- and leased intents are never purged.
DELETE FROM webhook_intent WHERE intent_id IN (
    SELECT intent_id FROM webhook_intent
    WHERE (status = 'accepted' AND finished_at < now() - make_interval(secs => @accepted_seconds::float8))
       OR (status IN ('failed', 'expired') AND finished_at < now() - make_interval(secs => @failed_seconds::float8))
    LIMIT @max_rows);

-- name: OldestOpenAge :one
-- OldestOpenAge is the age in seconds of the oldest intent not yet
-- accepted, failed or expired (0: none).
SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM webhook_intent WHERE status IN ('pending', 'leased');

-- name: CountByStatus :many
-- CountByStatus counts the intents of each status, each up to 100,000.
SELECT s.status::text AS status,
       (SELECT count(*) FROM (SELECT 1 FROM webhook_intent w WHERE w.status = s.status LIMIT 100000) c)::bigint AS count
FROM unnest(ARRAY['pending', 'leased', 'accepted', 'failed', 'expired']::text[]) AS s(status);

-- name: ListIntents :many
-- ListIntents reads a page of intents after @after (the zero id: from the
-- first) in id (creation) order, of one status and tenant when given.
SELECT i.intent_id, i.endpoint_id, i.tenant_id, i.idempotency_key, i.event_id, i.event_type, i.status, i.attempts,
       i.created_at, i.not_before, i.expires_at, i.first_attempt_at, i.last_attempt_at, i.last_status_code,
       i.last_error, i.response_ref, i.finished_at, i.operator_retries, e.url
FROM webhook_intent i JOIN webhook_endpoint e ON e.endpoint_id = i.endpoint_id
WHERE i.intent_id > @after
  AND (sqlc.narg(status)::text IS NULL OR i.status = sqlc.narg(status)::text)
  AND (sqlc.narg(tenant_id)::text IS NULL OR i.tenant_id = sqlc.narg(tenant_id)::text)
ORDER BY i.intent_id LIMIT @max_rows;

-- name: GetIntentStatus :one
SELECT i.status, (e.deleted_at IS NOT NULL)::bool AS endpoint_deleted
FROM webhook_intent i JOIN webhook_endpoint e ON e.endpoint_id = i.endpoint_id
WHERE i.intent_id = @intent_id;

-- name: RetryIntent :execrows
-- RetryIntent makes a failed or expired intent pending again, due now, with
-- a new expiry @ttl_seconds from now, for an operator. Its key, body and
-- attempt count stay: the receiver sees the same Webhook-Id.
UPDATE webhook_intent i
SET status = 'pending', not_before = now(), expires_at = now() + make_interval(secs => @ttl_seconds::float8),
    finished_at = NULL, operator_retries = i.operator_retries + 1
FROM webhook_endpoint e
WHERE i.intent_id = @intent_id AND i.status IN ('failed', 'expired')
  AND e.endpoint_id = i.endpoint_id AND e.deleted_at IS NULL;
