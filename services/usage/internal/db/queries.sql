-- name: InsertPriceEvidence :exec
INSERT INTO price_evidence (tenant_id, meter_code, currency, version, price_id, unit_price,
                            effective_at, event_id)
VALUES (@tenant_id, @meter_code, @currency, @version, @price_id, @unit_price,
        @effective_at, @event_id);

-- name: PriceEvidenceForMeters :many
-- The price schedules of the meters of a batch: which currencies each meter
-- is priced in and when its first version takes effect.
SELECT meter_code, currency, version, effective_at
FROM price_evidence
WHERE tenant_id = @tenant_id AND meter_code = ANY(@meter_codes::text[])
ORDER BY meter_code, currency, version;

-- name: InsertMeter :execrows
-- Records a catalog meter; a code (or an event type) already held is
-- skipped, and the caller compares what holds it.
INSERT INTO meters (code, aggregation, value_property, dimensions, event_type, event_id)
VALUES (@code, @aggregation, @value_property, @dimensions::text[], @event_type, @event_id)
ON CONFLICT DO NOTHING;

-- name: MeterByCodeOrEventType :many
-- The meters holding a code or an event type (at most two rows).
SELECT code, aggregation, value_property, dimensions, event_type
FROM meters
WHERE code = @code OR event_type = @event_type
ORDER BY code;

-- name: MetersByCode :many
-- The catalog meters of a batch's meter codes.
SELECT code, aggregation, value_property, dimensions, event_type
FROM meters
WHERE code = ANY(@codes::text[]);

-- name: MetersByEventType :many
-- The catalog meters fed by a batch's CloudEvents types.
SELECT code, aggregation, value_property, dimensions, event_type
FROM meters
WHERE event_type = ANY(@event_types::text[]);

-- name: InsertUsageFacts :many
-- Inserts a batch of facts in one statement. Each fact's source identity is
-- taken first in usage_fact_source, which is not partitioned and so holds
-- it for every month (decision 0025); only the facts whose identity it took
-- are inserted into usage_fact, in the partition of their usage_id's month.
-- Rows go in identity order, so concurrent batches sharing identities wait
-- for each other instead of deadlocking; an identity already taken is
-- skipped (the caller looks it up to answer replay or conflict).
WITH u AS (
    SELECT unnest(@usage_ids::uuid[])            AS usage_id,
           unnest(@source_systems::text[])       AS source_system,
           unnest(@source_event_ids::text[])     AS source_event_id,
           unnest(@meter_codes::text[])          AS meter_code,
           unnest(@quantities::numeric[])        AS quantity,
           unnest(@occurred_ats::timestamptz[])  AS occurred_at,
           unnest(@currencies::text[])           AS currency,
           unnest(@event_ids::uuid[])            AS event_id,
           unnest(@properties::text[])           AS properties
), taken AS (
    INSERT INTO usage_fact_source (tenant_id, source_system, source_event_id, usage_id, event_id)
    SELECT @tenant_id::text, u.source_system, u.source_event_id, u.usage_id, u.event_id
    FROM u
    ORDER BY u.source_system, u.source_event_id
    ON CONFLICT (tenant_id, source_system, source_event_id) DO NOTHING
    RETURNING usage_fact_source.usage_id
)
INSERT INTO usage_fact (usage_id, tenant_id, source_system, source_event_id, meter_code, quantity,
                        occurred_at, currency, event_id, accepted_at, properties)
SELECT u.usage_id, @tenant_id::text, u.source_system, u.source_event_id, u.meter_code, u.quantity,
       u.occurred_at, u.currency, u.event_id, @accepted_at::timestamptz, u.properties::jsonb
FROM u JOIN taken ON taken.usage_id = u.usage_id
RETURNING usage_fact.usage_id;

-- name: UsageFactsBySource :many
-- The facts holding a batch's source identities, found through
-- usage_fact_source (usage_id finds each in its month's partition). An
-- identity whose fact is archived has none (SourcesArchived).
SELECT f.usage_id, f.tenant_id, f.source_system, f.source_event_id, f.meter_code, f.quantity,
       f.occurred_at, f.currency, f.event_id, f.accepted_at, f.properties
FROM usage_fact_source s
JOIN usage_fact f ON f.usage_id = s.usage_id
WHERE s.tenant_id = @tenant_id
  AND (s.source_system, s.source_event_id) IN (
      SELECT unnest(@source_systems::text[]), unnest(@source_event_ids::text[]));

-- name: SourcesTaken :many
-- The usage ids holding a batch's source identities, whether or not their
-- facts are still in usage_fact (an archived month's are not).
SELECT source_system, source_event_id, usage_id
FROM usage_fact_source
WHERE tenant_id = @tenant_id
  AND (source_system, source_event_id) IN (
      SELECT unnest(@source_systems::text[]), unnest(@source_event_ids::text[]));

-- name: AddFactMonths :one
-- Creates the partitions of usage_fact for this month and the next ones
-- (decision 0025); how many it made.
SELECT usage_fact_add_months(@ahead::integer)::integer AS made;

-- name: GetUsageFact :one
SELECT usage_id, tenant_id, source_system, source_event_id, meter_code, quantity, occurred_at,
       currency, event_id, accepted_at, properties
FROM usage_fact
WHERE tenant_id = @tenant_id AND usage_id = @usage_id;

-- name: ReconciliationFacts :many
-- ReconciliationFacts reads a page of a tenant's usage facts that occurred
-- in a month (UTC), in UsageAccepted event id order after a position.
SELECT event_id, usage_id, meter_code, quantity,
       to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM')::text AS period
FROM usage_fact
WHERE tenant_id = @tenant_id
  AND date_trunc('month', occurred_at AT TIME ZONE 'UTC') = @month::timestamp
  AND event_id > @after
ORDER BY event_id
LIMIT @row_limit;

-- name: LockAcceptanceShared :exec
-- Every accepting transaction holds the acceptance lock shared, first, and
-- reads the cut after it (AcceptanceCut): a cut waits for the transactions
-- in flight and the next ones see it (decision 0014).
SELECT pg_advisory_xact_lock_shared(hashtextextended('usage.acceptance', 0));

-- name: LockAcceptanceExclusive :exec
SELECT pg_advisory_xact_lock(hashtextextended('usage.acceptance', 0));

-- name: AcceptanceCut :one
SELECT through, outbox_through, published FROM usage_watermark_cut;

-- name: LockAcceptanceCut :one
SELECT through, outbox_through, published FROM usage_watermark_cut FOR UPDATE;

-- name: SetAcceptanceCut :exec
UPDATE usage_watermark_cut
SET through = @through, outbox_through = @outbox_through, published = false, cut_at = now();

-- name: MarkAcceptanceCutPublished :exec
UPDATE usage_watermark_cut SET published = true WHERE through = @through;
