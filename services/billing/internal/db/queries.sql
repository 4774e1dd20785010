-- Billing's business SQL. The outbox, inbox and idempotency SQL lives in pkg.

-- name: InsertPriceEvidence :execrows
-- Replicates one price version; a replay of the same version changes nothing.
INSERT INTO price_evidence (tenant_id, meter_code, currency, version, unit_price, effective_at, price_id, event_id,
                            model, tiers, package_size, package_price, dimensions, dimensions_key, dimension_count)
VALUES (@tenant_id, @meter_code, @currency, @version, @unit_price, @effective_at, @price_id, @event_id,
        @model, sqlc.narg(tiers)::jsonb, @package_size, @package_price, sqlc.arg(dimensions)::jsonb,
        sqlc.arg(dimensions_key)::text, sqlc.arg(dimension_count)::smallint)
ON CONFLICT DO NOTHING;

-- name: InsertMeter :execrows
-- Replicates a catalog meter's definition; a meter never changes, so a
-- replay changes nothing.
INSERT INTO meters (code, aggregation, value_property, dimensions, event_id, defined_at)
VALUES (@code, @aggregation, @value_property, sqlc.arg(dimensions)::text[], @event_id, @defined_at)
ON CONFLICT DO NOTHING;

-- name: HasPriceVersion :one
-- Whether billing holds a version of a series (and so every version before
-- it: the inbox applies a series' versions in order).
SELECT EXISTS (SELECT 1 FROM price_evidence
               WHERE tenant_id = @tenant_id AND meter_code = @meter_code AND currency = @currency
                 AND version = @version)::boolean AS held;

-- name: TryLockScheduleShard :one
-- Locks a schedule shard's row for the transaction unless another
-- transaction holds it (busy, with nothing read). The caller then defers
-- instead of waiting, since waiting could deadlock: one batch may raise
-- several shards in an order that another batch, on another partition,
-- reverses.
WITH mine AS (
    SELECT s.contiguous_seq, s.known_through FROM schedule_shard s
    WHERE s.shard = sqlc.arg(shard)::int
    FOR UPDATE SKIP LOCKED
)
SELECT (NOT EXISTS (SELECT 1 FROM mine))::boolean AS busy,
       COALESCE((SELECT contiguous_seq FROM mine), 0)::bigint AS contiguous_seq,
       COALESCE((SELECT known_through FROM mine), 'epoch')::timestamptz AS known_through;

-- name: RecordScheduleSeq :exec
-- Records that billing holds activation @seq of a shard.
INSERT INTO schedule_seq (shard, seq) VALUES (@shard, @seq) ON CONFLICT DO NOTHING;

-- name: FirstMissingScheduleSeq :one
-- The first of the shard's activations @after + 1 .. @through billing does
-- not hold (0: it holds them all). Bounded by @through - @after, the
-- activations since the last watermark billing applied.
SELECT COALESCE(min(g), 0)::bigint AS missing
FROM generate_series(sqlc.arg(after)::bigint + 1, sqlc.arg(through)::bigint) g
WHERE NOT EXISTS (SELECT 1 FROM schedule_seq q WHERE q.shard = sqlc.arg(shard)::int AND q.seq = g);

-- name: RaiseScheduleShard :exec
-- Records that billing holds the shard's activations 1 to @seq and knows
-- the shard's schedule through @known_through (neither lowered), and drops
-- the out-of-order records contiguous_seq now covers. The row is locked
-- by TryLockScheduleShard.
WITH up AS (
    UPDATE schedule_shard
    SET contiguous_seq = GREATEST(contiguous_seq, sqlc.arg(seq)::bigint),
        known_through = GREATEST(known_through, sqlc.arg(known_through)::timestamptz), updated_at = now()
    WHERE shard = sqlc.arg(shard)::int
)
DELETE FROM schedule_seq WHERE shard = sqlc.arg(shard)::int AND seq <= sqlc.arg(seq)::bigint;

-- name: LockPeriodShared :exec
-- Takes the period's advisory lock shared for the transaction: rating and
-- adjustments hold it, any number at once; a close takes it exclusively
-- (LockPeriodExclusive) and so waits for the rating transactions in flight
-- and holds back new ones while it changes the period's status. Run it as
-- its own statement, before the statement that reads the status, so that
-- statement's snapshot is taken after the lock is held.
SELECT pg_advisory_xact_lock_shared(hashtextextended(@tenant_id::text || '|' || @period::text, 7365))::text;

-- name: LockPeriodExclusive :exec
SELECT pg_advisory_xact_lock(hashtextextended(@tenant_id::text || '|' || @period::text, 7365))::text;

-- name: LockPeriodsShared :exec
-- LockPeriodsShared takes the advisory locks of LockPeriodShared of every
-- distinct (tenant, period) pair given and the tenant close lock of every
-- distinct tenant (LockCloseStart), shared, in the order of their keys (so
-- raters holding several never wait for each other or a close in a cycle).
-- Run it as its own statement, before the statement that reads the
-- statuses.
SELECT count(pg_advisory_xact_lock_shared(l.k))
FROM (SELECT DISTINCT a.k
      FROM (SELECT hashtextextended(u.tenant_id || '|' || u.period, 7365) AS k
            FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period) u
            UNION ALL
            SELECT hashtextextended(t.tenant_id, 7368) AS k
            FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id) t) a
      ORDER BY 1) l;

-- name: LockCloseStart :exec
-- LockCloseStart takes, exclusively and in key order, the period's lock
-- (LockPeriodExclusive) and the tenant's close lock that every rating
-- transaction holds shared (LockPeriodsShared): the first step of a close
-- waits for the ratings of every period of the tenant in flight, so what it
-- reads of the tenant's earlier periods is final, and every rating after
-- it sees the period closing (periods close in order, decision 0014).
SELECT count(pg_advisory_xact_lock(l.k))
FROM (SELECT hashtextextended(@tenant_id::text || '|' || @period::text, 7365) AS k
      UNION ALL
      SELECT hashtextextended(@tenant_id::text, 7368) AS k
      ORDER BY 1) l;

-- name: EarliestUnclosedBefore :one
-- The earliest period before @period with charges that is not closed,
-- after the tenant's latest closed period before it; '' when none.
SELECT COALESCE((
    SELECT c.period FROM charge c
    WHERE c.tenant_id = @tenant_id AND c.period < @period
      AND c.period > COALESCE((SELECT max(b.period) FROM billing_period b
                               WHERE b.tenant_id = @tenant_id AND b.period < @period AND b.status = 'closed'), '')
    ORDER BY c.period LIMIT 1), '')::text AS period;

-- name: PreviousClosedPeriod :one
-- The tenant's latest closed period before @period; '' when none.
SELECT COALESCE((SELECT max(b.period) FROM billing_period b
                 WHERE b.tenant_id = @tenant_id AND b.period < @period AND b.status = 'closed'), '')::text AS period;

-- name: RateUsages :many
-- RateUsages rates usage facts, each into its period, in one statement,
-- under the periods' shared locks (LockPeriodsShared). Per fact it reads
-- its meter (the catalog's row: its aggregation and, for unique_count, the
-- value the fact counts), what billing knows of the series' schedule, the
-- price-sheet entry in effect at its occurrence and its period's status. The
-- entry: per dimension set the highest version taking effect at or before
-- the occurrence (versions take effect in version order); among those whose
-- dimensions all equal the fact's properties the most specific, ties to the
-- smaller dimensions_key (catalog.Choose). Read only when the schedule is
-- known through the occurrence. A period is open while neither it nor a
-- later period of the tenant is closing or closed (periods close in order:
-- a fact of an earlier period is late); a period without a row is open:
-- only a close writes period rows (MarkPeriodClosing, under the exclusive
-- lock), so raters never write a row another rater may be writing. The
-- status read is that of the first such period. The charge of a
-- fact is inserted when its meter is held, the schedule is known, its
-- period is open and (unique_count) it has its value: priced at the entry,
-- or unpriced (version 0, no price) when none is in effect. A sum or count
-- charge under unit pricing has its own amount (count: its unit price);
-- the others have none. It returns per fact, in the order given, what it
-- read; the charges are inserted in that order, and what they add to each
-- line of their periods is written beside them (charge_line_part,
-- charge_line_value), so a period's read sums parts, not charges.
WITH u AS (
    SELECT unnest(@tenant_ids::text[])                AS tenant_id,
           unnest(@meter_codes::text[])               AS meter_code,
           unnest(@currencies::text[])                AS currency,
           unnest(@periods::text[])                   AS period,
           unnest(@charge_ids::uuid[])                AS charge_id,
           unnest(@event_ids::uuid[])                 AS event_id,
           unnest(@usage_event_ids::uuid[])           AS usage_event_id,
           unnest(@usage_ids::uuid[])                 AS usage_id,
           unnest(@quantities::numeric[])             AS quantity,
           unnest(@occurred_ats::timestamptz[])       AS occurred_at,
           unnest(@lates::boolean[])                  AS late,
           unnest(@properties::text[])::jsonb         AS properties,
           unnest(@source_systems::text[])            AS source_system,
           unnest(@source_event_ids::text[])          AS source_event_id,
           unnest(@shards::int[])                     AS shard,
           generate_series(1, cardinality(@tenant_ids::text[])) AS n
), r AS (
    -- One index probe per fact and lookup: see inbox's lookups.
    SELECT u.*,
           m.aggregation,
           CASE WHEN m.aggregation = 'unique_count' THEN u.properties ->> m.value_property ELSE '' END AS value,
           COALESCE(u.occurred_at < ps.known_through AND (sub.plan_code IS NULL OR u.occurred_at < pps.known_through),
                    false) AS known,
           COALESCE(u.occurred_at < ps.known_through, false) AS tenant_known,
           COALESCE(p.version, pc.version) AS price_version,
           CASE WHEN p.version IS NOT NULL THEN p.unit_price ELSE pc.unit_price END AS price_unit_price,
           CASE WHEN p.version IS NOT NULL THEN p.model ELSE pc.model END AS model,
           CASE WHEN p.version IS NOT NULL THEN p.dimensions ELSE pc.dimensions END AS dimensions,
           CASE WHEN p.version IS NOT NULL THEN p.dimensions_key ELSE pc.dimensions_key END AS dimensions_key,
           CASE WHEN p.version IS NULL AND pc.version IS NOT NULL THEN sub.plan_code ELSE '' END AS plan_code,
           COALESCE((SELECT b.status FROM billing_period b
                     WHERE b.tenant_id = u.tenant_id AND b.period >= u.period AND b.status <> 'open'
                     ORDER BY b.period LIMIT 1), 'open') AS status
    FROM u
    LEFT JOIN meters m ON m.code = u.meter_code
    LEFT JOIN schedule_shard ps ON ps.shard = u.shard
    LEFT JOIN schedule_shard pps ON pps.shard = 16 -- events.PlanShard
    LEFT JOIN LATERAL (
        SELECT e.version, e.unit_price, e.model, e.dimensions, e.dimensions_key
        FROM (SELECT DISTINCT ON (pe.dimensions_key)
                     pe.version, pe.unit_price, pe.model, pe.dimensions, pe.dimensions_key, pe.dimension_count
              FROM price_evidence pe
              WHERE pe.tenant_id = u.tenant_id AND pe.meter_code = u.meter_code
                AND pe.currency = u.currency AND pe.effective_at <= u.occurred_at
              ORDER BY pe.dimensions_key, pe.version DESC) e
        WHERE e.dimension_count = 0 OR e.dimensions <@ u.properties
        ORDER BY e.dimension_count DESC, e.dimensions_key COLLATE "C"
        LIMIT 1) p ON u.occurred_at < ps.known_through AND m.code IS NOT NULL
    -- Without a price of its own: the subscription in effect at the
    -- occurrence (known once the tenant's shard is: a subscription never
    -- starts or ends at or before it), its plan's version in effect (known
    -- once the plans' shard is) and that version's most specific charge of
    -- the meter, in the fact's currency. A tenant's subscriptions never
    -- overlap (app.Subscribe ends the one in effect where the next starts,
    -- EndSubscription never past a later one's start), so the one in effect
    -- is the latest started at or before the occurrence if it has not ended
    -- by then, and none otherwise: one index row, where filtering the
    -- started ones on their end walked back through every ended one.
    LEFT JOIN LATERAL (
        SELECT l.plan_code
        FROM (SELECT s.plan_code, s.ends_at FROM subscription s
              WHERE s.tenant_id = u.tenant_id AND s.starts_at <= u.occurred_at
              ORDER BY s.starts_at DESC
              LIMIT 1) l
        WHERE COALESCE(l.ends_at, 'infinity'::timestamptz) > u.occurred_at) sub
        ON u.occurred_at < ps.known_through AND m.code IS NOT NULL
    LEFT JOIN LATERAL (
        SELECT pv.version, pv.currency FROM plan_evidence pv
        WHERE pv.code = sub.plan_code AND pv.effective_at <= u.occurred_at
        ORDER BY pv.version DESC
        LIMIT 1) pv ON sub.plan_code IS NOT NULL AND u.occurred_at < pps.known_through
    LEFT JOIN LATERAL (
        SELECT pch.version, pch.unit_price, pch.model, pch.dimensions, pch.dimensions_key
        FROM plan_charge pch
        WHERE pch.code = sub.plan_code AND pch.version = pv.version AND pch.meter_code = u.meter_code
          AND (pch.dimension_count = 0 OR pch.dimensions <@ u.properties)
        ORDER BY pch.dimension_count DESC, pch.dimensions_key COLLATE "C"
        LIMIT 1) pc ON p.version IS NULL AND pv.currency = u.currency
), c AS (
    SELECT r.*,
           CASE WHEN r.price_version IS NOT NULL AND r.aggregation IN ('sum', 'count') AND r.model = 'unit'
                THEN r.price_unit_price ELSE 0 END AS unit_price
    FROM r
), o AS (
    -- What makes the charge its fact's only one, in any month: charge is
    -- partitioned by month, charge_origin is not (decision 0025). A fact
    -- charged before is a violation of charge_usage_id_key or
    -- charge_usage_event_id_key here, as it was of charge's own.
    INSERT INTO charge_origin (tenant_id, usage_id, usage_event_id, event_id, charge_id)
    SELECT c.tenant_id, c.usage_id, c.usage_event_id, c.event_id, c.charge_id
    FROM c
    WHERE c.aggregation IS NOT NULL AND c.known AND c.status = 'open'
      AND (c.aggregation <> 'unique_count' OR COALESCE(c.value, '') <> '')
    ORDER BY c.n
), ch AS (
    INSERT INTO charge (charge_id, event_id, usage_event_id, usage_id, tenant_id, meter_code, currency,
                        quantity, unit_price, price_version, amount, period, late, occurred_at, model,
                        aggregation, dimensions, dimensions_key, properties, source_system, source_event_id,
                        value, unpriced, plan_code)
    SELECT c.charge_id, c.event_id, c.usage_event_id, c.usage_id, c.tenant_id, c.meter_code, c.currency,
           c.quantity, c.unit_price, COALESCE(c.price_version, 0),
           (CASE WHEN c.aggregation = 'count' THEN 1 ELSE c.quantity END) * c.unit_price,
           c.period, c.late, c.occurred_at, COALESCE(c.model, 'unit'),
           c.aggregation, COALESCE(c.dimensions, '{}'), COALESCE(c.dimensions_key, ''), c.properties,
           c.source_system, c.source_event_id, c.value, c.price_version IS NULL, c.plan_code
    FROM c
    WHERE c.aggregation IS NOT NULL AND c.known AND c.status = 'open'
      AND (c.aggregation <> 'unique_count' OR COALESCE(c.value, '') <> '')
    ORDER BY c.n
), k AS (
    -- The charges inserted, by line: what the batch adds to each line's
    -- part and value set.
    SELECT c.tenant_id, c.period, c.meter_code, c.currency, c.plan_code, COALESCE(c.price_version, 0) AS price_version,
           COALESCE(c.dimensions_key, '') AS dimensions_key, c.price_version IS NULL AS unpriced, c.aggregation,
           COALESCE(c.dimensions, '{}')::text AS dimensions, c.quantity,
           (CASE WHEN c.aggregation = 'count' THEN 1 ELSE c.quantity END) * c.unit_price AS amount,
           c.value, c.occurred_at, c.source_system, c.source_event_id
    FROM c
    WHERE c.aggregation IS NOT NULL AND c.known AND c.status = 'open'
      AND (c.aggregation <> 'unique_count' OR COALESCE(c.value, '') <> '')
), v AS (
    -- The values of unique_count lines new to their sets (inserted in key
    -- order, so two batches wait for each other's values in one order).
    INSERT INTO charge_line_value (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key,
                                   unpriced, value)
    SELECT DISTINCT k.tenant_id, k.period, k.meter_code, k.currency, k.plan_code, k.price_version, k.dimensions_key,
           k.unpriced, k.value
    FROM k WHERE k.aggregation = 'unique_count'
    ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key, unpriced
), lt AS (
    SELECT DISTINCT ON (k.tenant_id, k.period, k.meter_code, k.currency, k.plan_code, k.price_version,
                        k.dimensions_key, k.unpriced)
           k.tenant_id, k.period, k.meter_code, k.currency, k.plan_code, k.price_version, k.dimensions_key, k.unpriced,
           k.occurred_at, k.source_system, k.source_event_id, k.quantity
    FROM k WHERE k.aggregation = 'latest'
    ORDER BY k.tenant_id, k.period, k.meter_code, k.currency, k.plan_code, k.price_version, k.dimensions_key,
             k.unpriced, k.occurred_at DESC, k.source_system COLLATE "C" DESC, k.source_event_id COLLATE "C" DESC
), part AS (
    -- One part per line the batch charged (charge_line_part).
    INSERT INTO charge_line_part (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key,
                                  unpriced, aggregation, dimensions, charges, total, peak, amount, new_values,
                                  has_latest, latest_at, latest_system, latest_source, latest_quantity)
    SELECT g.tenant_id, g.period, g.meter_code, g.currency, g.plan_code, g.price_version, g.dimensions_key, g.unpriced,
           g.aggregation, g.dimensions, g.charges, g.total, g.peak, g.amount,
           (SELECT count(*) FROM v
            WHERE v.tenant_id = g.tenant_id AND v.period = g.period AND v.meter_code = g.meter_code
              AND v.currency = g.currency AND v.plan_code = g.plan_code AND v.price_version = g.price_version
              AND v.dimensions_key = g.dimensions_key AND v.unpriced = g.unpriced AND g.aggregation = 'unique_count'),
           lt.occurred_at IS NOT NULL, COALESCE(lt.occurred_at, 'epoch'), COALESCE(lt.source_system, ''),
           COALESCE(lt.source_event_id, ''), COALESCE(lt.quantity, 0)
    FROM (SELECT k.tenant_id, k.period, k.meter_code, k.currency, k.plan_code, k.price_version, k.dimensions_key,
                 k.unpriced, k.aggregation, min(k.dimensions) AS dimensions, count(*) AS charges,
                 sum(k.quantity) AS total, max(k.quantity) AS peak, sum(k.amount) AS amount
          FROM k
          GROUP BY k.tenant_id, k.period, k.meter_code, k.currency, k.plan_code, k.price_version, k.dimensions_key,
                   k.unpriced, k.aggregation) g
    LEFT JOIN lt ON lt.tenant_id = g.tenant_id AND lt.period = g.period AND lt.meter_code = g.meter_code
                AND lt.currency = g.currency AND lt.plan_code = g.plan_code AND lt.price_version = g.price_version
                AND lt.dimensions_key = g.dimensions_key AND lt.unpriced = g.unpriced AND g.aggregation = 'latest'
)
SELECT (c.aggregation IS NOT NULL)::boolean AS defined, COALESCE(c.aggregation, '')::text AS aggregation,
       COALESCE(c.value, '')::text AS value, c.known::boolean AS known, c.tenant_known::boolean AS tenant_known,
       (c.price_version IS NOT NULL)::boolean AS priced,
       COALESCE(c.price_version, 0)::bigint AS price_version, c.unit_price::numeric AS unit_price,
       COALESCE(c.price_unit_price, 0)::numeric AS price_unit_price,
       COALESCE(c.model, 'unit')::text AS model, COALESCE(c.dimensions, '{}')::jsonb AS dimensions,
       COALESCE(c.dimensions_key, '')::text AS dimensions_key, c.plan_code::text AS plan_code,
       c.status::text AS status
FROM c ORDER BY c.n;

-- name: VersionPricings :many
-- The pricing of the given versions of the tenant's series, for the
-- ChargeRated of charges under the other models than unit.
SELECT pe.meter_code, pe.currency, pe.version, pe.model, pe.unit_price, pe.tiers, pe.package_size, pe.package_price
FROM price_evidence pe
WHERE pe.tenant_id = @tenant_id
  AND (pe.meter_code, pe.currency, pe.version) IN (
      SELECT unnest(@meter_codes::text[]), unnest(@currencies::text[]), unnest(@versions::bigint[]));

-- name: ChargeChunkLines :many
-- One chunk of a period's charges, the one definition of how charges make
-- lines (app.periodTally adds it to a running tally): the next chunk_size
-- charges of the period after the position, in usage_event_id order (one
-- range scan of charge_reconciliation_idx, bounded by the chunk whatever
-- the period's size), grouped per line (meter, currency, plan, price
-- version, price dimensions, unpriced, aggregation): count, sum, peak,
-- own amounts, the digest terms of the event ids, the chunk's distinct
-- values (unique_count) and its latest charge by occurrence, ties to the
-- larger (source system, source event id) in byte order. Each row also
-- carries the chunk's charge count and last usage_event_id (the next
-- position); no row when the chunk is empty.
WITH c AS (
    SELECT ch.usage_event_id, ch.event_id, ch.meter_code, ch.currency, ch.plan_code, ch.price_version,
           ch.dimensions_key, ch.unpriced, ch.aggregation, ch.dimensions, ch.quantity, ch.amount, ch.value,
           ch.occurred_at, ch.source_system, ch.source_event_id
    FROM charge ch
    WHERE ch.tenant_id = @tenant_id AND ch.period = @period AND ch.usage_event_id > sqlc.arg(after)::uuid
    ORDER BY ch.usage_event_id
    LIMIT sqlc.arg(chunk_size)::int
), g AS (
    SELECT c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key, c.unpriced, c.aggregation,
           min(c.dimensions::text) AS dimensions, count(*) AS charges, sum(c.quantity) AS total, max(c.quantity) AS peak,
           sum(c.amount) AS amount,
           sum(('x' || encode(substr(sha256(convert_to(c.event_id::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint)::numeric
               AS digest,
           array_agg(DISTINCT c.value) FILTER (WHERE c.aggregation = 'unique_count') AS vals
    FROM c
    GROUP BY c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key, c.unpriced, c.aggregation
), lt AS (
    SELECT DISTINCT ON (c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key, c.unpriced)
           c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key, c.unpriced,
           c.occurred_at, c.source_system, c.source_event_id, c.quantity
    FROM c
    WHERE c.aggregation = 'latest'
    ORDER BY c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key, c.unpriced,
             c.occurred_at DESC, c.source_system COLLATE "C" DESC, c.source_event_id COLLATE "C" DESC
)
SELECT g.meter_code, g.currency, g.plan_code, g.price_version, g.dimensions_key, g.unpriced, g.aggregation,
       g.dimensions::text AS dimensions, g.charges::bigint AS charges, g.total::numeric AS total,
       g.peak::numeric AS peak, g.amount::numeric AS amount, g.digest::numeric AS digest,
       COALESCE(g.vals, '{}')::text[] AS vals,
       (lt.occurred_at IS NOT NULL)::boolean AS has_latest,
       COALESCE(lt.occurred_at, 'epoch')::timestamptz AS latest_at,
       COALESCE(lt.source_system, '')::text AS latest_system, COALESCE(lt.source_event_id, '')::text AS latest_source,
       COALESCE(lt.quantity, 0)::numeric AS latest_quantity,
       (SELECT count(*) FROM c)::bigint AS chunk_charges,
       (SELECT c.usage_event_id FROM c ORDER BY c.usage_event_id DESC LIMIT 1)::uuid AS chunk_last
FROM g
LEFT JOIN lt ON lt.meter_code = g.meter_code AND lt.currency = g.currency AND lt.plan_code = g.plan_code
            AND lt.price_version = g.price_version AND lt.dimensions_key = g.dimensions_key
            AND lt.unpriced = g.unpriced AND g.aggregation = 'latest';

-- name: PartLines :many
-- A period's lines summed from its parts (charge_line_part, at most
-- BILLING_PARTS_FOLD_AT + 1 rows a line however many batches it has had),
-- the same figures ChargeChunkLines's chunks add up to over its charges:
-- count, sums, peak, own amounts, distinct values (the values each part
-- added new to the line's set) and the latest charge by occurrence, ties
-- to the larger (source system, source event id) in byte order. At most
-- line_limit lines, in key order.
WITH g AS (
    SELECT p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key, p.unpriced, p.aggregation,
           min(p.dimensions) AS dimensions, sum(p.charges) AS charges, sum(p.total) AS total, max(p.peak) AS peak,
           sum(p.amount) AS amount, sum(p.new_values) AS distinct_values
    FROM charge_line_part p
    WHERE p.tenant_id = @tenant_id AND p.period = @period
    GROUP BY p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key, p.unpriced, p.aggregation
    ORDER BY p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key, p.unpriced, p.aggregation
    LIMIT sqlc.arg(line_limit)::int
), lt AS (
    SELECT DISTINCT ON (p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key, p.unpriced)
           p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key, p.unpriced,
           p.latest_at, p.latest_system, p.latest_source, p.latest_quantity
    FROM charge_line_part p
    WHERE p.tenant_id = @tenant_id AND p.period = @period AND p.has_latest
    ORDER BY p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key, p.unpriced,
             p.latest_at DESC, p.latest_system COLLATE "C" DESC, p.latest_source COLLATE "C" DESC
)
SELECT g.meter_code, g.currency, g.plan_code, g.price_version, g.dimensions_key, g.unpriced, g.aggregation,
       g.dimensions::text AS dimensions, g.charges::bigint AS charges, g.total::numeric AS total,
       g.peak::numeric AS peak, g.amount::numeric AS amount, g.distinct_values::bigint AS distinct_values,
       (lt.latest_at IS NOT NULL)::boolean AS has_latest,
       COALESCE(lt.latest_at, 'epoch')::timestamptz AS latest_at,
       COALESCE(lt.latest_system, '')::text AS latest_system, COALESCE(lt.latest_source, '')::text AS latest_source,
       COALESCE(lt.latest_quantity, 0)::numeric AS latest_quantity
FROM g
LEFT JOIN lt ON lt.meter_code = g.meter_code AND lt.currency = g.currency AND lt.plan_code = g.plan_code
            AND lt.price_version = g.price_version AND lt.dimensions_key = g.dimensions_key
            AND lt.unpriced = g.unpriced AND g.aggregation = 'latest'
ORDER BY g.meter_code, g.currency, g.plan_code, g.price_version, g.dimensions_key, g.unpriced, g.aggregation;

-- name: FoldParts :one
-- FoldParts replaces the parts of each line of the tenants' periods given
-- that has more than @most of them by one part, their sum (what PartLines
-- reads of them): a line's parts grow by one a batch and fold every @most
-- batches, so what a read sums, and what the table keeps, is bounded by the
-- period's lines, not its batches. A period another transaction is folding
-- (its transaction-scoped advisory lock taken, pg_try_advisory_xact_lock)
-- is left to it: two folds would delete the same rows, one waiting for the
-- other or, in another order, deadlocking. Parts a concurrent batch has not
-- committed are not in the statement's snapshot and stay as they are. It
-- returns the parts removed.
WITH tp AS (
    SELECT DISTINCT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period
    ORDER BY 1, 2
), mine AS (
    SELECT tp.tenant_id, tp.period FROM tp
    WHERE pg_try_advisory_xact_lock(hashtextextended(
        'billing.parts.' || length(tp.tenant_id) || ':' || tp.tenant_id || tp.period, 0))
), many AS (
    SELECT p.tenant_id, p.period, p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key,
           p.unpriced, p.aggregation
    FROM mine JOIN charge_line_part p ON p.tenant_id = mine.tenant_id AND p.period = mine.period
    GROUP BY p.tenant_id, p.period, p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key,
             p.unpriced, p.aggregation
    HAVING count(*) > @most::int
), gone AS (
    DELETE FROM charge_line_part p USING many m
    WHERE p.tenant_id = m.tenant_id AND p.period = m.period AND p.meter_code = m.meter_code
      AND p.currency = m.currency AND p.plan_code = m.plan_code AND p.price_version = m.price_version
      AND p.dimensions_key = m.dimensions_key AND p.unpriced = m.unpriced AND p.aggregation = m.aggregation
    RETURNING p.*
), folded AS (
    INSERT INTO charge_line_part (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key,
                                  unpriced, aggregation, dimensions, charges, total, peak, amount, new_values,
                                  has_latest, latest_at, latest_system, latest_source, latest_quantity)
    SELECT g.tenant_id, g.period, g.meter_code, g.currency, g.plan_code, g.price_version, g.dimensions_key,
           g.unpriced, g.aggregation, min(g.dimensions), sum(g.charges), sum(g.total), max(g.peak), sum(g.amount),
           sum(g.new_values), bool_or(g.has_latest),
           coalesce((array_agg(g.latest_at ORDER BY g.latest_at DESC, g.latest_system COLLATE "C" DESC,
                               g.latest_source COLLATE "C" DESC) FILTER (WHERE g.has_latest))[1], 'epoch'),
           coalesce((array_agg(g.latest_system ORDER BY g.latest_at DESC, g.latest_system COLLATE "C" DESC,
                               g.latest_source COLLATE "C" DESC) FILTER (WHERE g.has_latest))[1], ''),
           coalesce((array_agg(g.latest_source ORDER BY g.latest_at DESC, g.latest_system COLLATE "C" DESC,
                               g.latest_source COLLATE "C" DESC) FILTER (WHERE g.has_latest))[1], ''),
           coalesce((array_agg(g.latest_quantity ORDER BY g.latest_at DESC, g.latest_system COLLATE "C" DESC,
                               g.latest_source COLLATE "C" DESC) FILTER (WHERE g.has_latest))[1], 0)
    FROM gone g
    GROUP BY g.tenant_id, g.period, g.meter_code, g.currency, g.plan_code, g.price_version, g.dimensions_key,
             g.unpriced, g.aggregation
    RETURNING 1
)
SELECT ((SELECT count(*) FROM gone) - (SELECT count(*) FROM folded))::bigint AS removed;

-- name: LinePricings :many
-- The pricing of lines (the one definition of a line's price joins): per
-- line given, in the order given, its version's pricing from the tenant's
-- price evidence, or from the plan's charge for a line priced by a plan,
-- unit at 0 for an unpriced line. One indexed probe per line.
WITH u AS (
    SELECT unnest(@meter_codes::text[])      AS meter_code,
           unnest(@currencies::text[])       AS currency,
           unnest(@plan_codes::text[])       AS plan_code,
           unnest(@price_versions::bigint[]) AS price_version,
           unnest(@dimensions_keys::text[])  AS dimensions_key,
           unnest(@unpriceds::boolean[])     AS unpriced,
           generate_series(1, cardinality(@meter_codes::text[])) AS n
)
SELECT u.n::int AS n,
       COALESCE(pe.model, pc.model, 'unit')::text AS model, COALESCE(pe.unit_price, pc.unit_price, 0)::numeric AS unit_price,
       COALESCE(pe.tiers, pc.tiers) AS tiers,
       COALESCE(pe.package_size, pc.package_size, 0)::numeric AS package_size,
       COALESCE(pe.package_price, pc.package_price, 0)::numeric AS package_price
FROM u
LEFT JOIN price_evidence pe ON pe.tenant_id = @tenant_id AND pe.meter_code = u.meter_code
                           AND pe.currency = u.currency AND pe.version = u.price_version AND NOT u.unpriced
                           AND u.plan_code = ''
LEFT JOIN plan_charge pc ON pc.code = u.plan_code AND pc.version = u.price_version AND pc.meter_code = u.meter_code
                        AND pc.dimensions_key = u.dimensions_key AND u.plan_code <> ''
ORDER BY u.n;

-- name: PeriodAdjustments :many
-- The adjustments a period's close counts (posted before it closed), summed
-- per currency.
SELECT a.currency, sum(a.amount)::numeric AS amount
FROM adjustment a
WHERE a.tenant_id = @tenant_id AND a.period = @period AND NOT a.after_close
GROUP BY a.currency
ORDER BY a.currency;

-- name: NonOpenPeriodsFrom :many
-- The periods from @period on that no longer take charges, in order.
SELECT period FROM billing_period
WHERE tenant_id = @tenant_id AND period >= @period AND status <> 'open'
ORDER BY period;

-- name: GetCharge :one
SELECT charge_id, event_id, usage_event_id, usage_id, meter_code, currency, quantity, unit_price,
       price_version, amount, period, late, occurred_at
FROM charge
WHERE tenant_id = @tenant_id AND charge_id = @charge_id;

-- name: ListCharges :many
-- One page of a period's charges in line order (meter, currency, price
-- version, charge id), after the keyset position of the previous page.
SELECT charge_id, event_id, usage_event_id, usage_id, meter_code, currency, quantity, unit_price,
       price_version, amount, period, late, occurred_at, model, aggregation, dimensions, properties, unpriced, plan_code
FROM charge
WHERE tenant_id = @tenant_id AND period = @period
  AND (meter_code, currency, price_version, charge_id) >
      (sqlc.arg(after_meter)::text, sqlc.arg(after_currency)::text, sqlc.arg(after_version)::bigint, sqlc.arg(after_charge)::uuid)
ORDER BY meter_code, currency, price_version, charge_id
LIMIT sqlc.arg(row_limit);

-- name: ListMeterCharges :many
-- The same for one meter, and optionally one price version: the charges
-- behind one invoice line. The meter is an index equality, so a page costs
-- the rows it returns.
SELECT charge_id, event_id, usage_event_id, usage_id, meter_code, currency, quantity, unit_price,
       price_version, amount, period, late, occurred_at, model, aggregation, dimensions, properties, unpriced, plan_code
FROM charge
WHERE tenant_id = @tenant_id AND period = @period AND meter_code = @meter_code
  AND (sqlc.narg(price_version)::bigint IS NULL OR price_version = sqlc.narg(price_version)::bigint)
  AND (currency, price_version, charge_id) >
      (sqlc.arg(after_currency)::text, sqlc.arg(after_version)::bigint, sqlc.arg(after_charge)::uuid)
ORDER BY currency, price_version, charge_id
LIMIT sqlc.arg(row_limit);

-- name: PeriodStatus :one
-- A period's status; open when it has no row yet.
SELECT COALESCE((SELECT status FROM billing_period WHERE tenant_id = @tenant_id AND period = @period), 'open')::text AS status;

-- name: InsertAdjustment :exec
INSERT INTO adjustment (adjustment_id, event_id, tenant_id, correction_of, amount, currency, reason,
                        period, after_close, actor)
VALUES (@adjustment_id, @event_id, @tenant_id, @correction_of, @amount, @currency, @reason,
        @period, @after_close, sqlc.arg(actor)::text);

-- name: LockPeriodAdjustments :exec
-- Takes the adjustment lock of a tenant's period, exclusively, for the
-- transaction: an adjustment holds it while it counts the period's
-- adjustments (CountPeriodAdjustments) and inserts itself, so concurrent
-- adjustments of one period are counted one after the other and cannot
-- together pass BILLING_MAX_ADJUSTMENTS. Taken after the period's shared
-- lock and before the credit lock, always in that order.
SELECT pg_advisory_xact_lock(hashtextextended(@tenant_id::text || '|' || @period::text, 7367))::text;

-- name: CountPeriodAdjustments :one
-- How many adjustments a tenant's period has, posted before or after its
-- close, counted up to @row_limit (the cap): it reads at most that many
-- entries of adjustment_period whatever the period holds.
SELECT count(*)::bigint AS adjustments
FROM (SELECT 1 FROM adjustment a WHERE a.tenant_id = @tenant_id AND a.period = @period
      LIMIT sqlc.arg(row_limit)) a;

-- name: LockPeriodCredits :exec
-- Takes the credit lock of a tenant's period and currency, exclusively, for
-- the transaction: a credit holds it while it reads the period's balance
-- (PeriodBalance) and inserts itself, so concurrent credits of one period
-- and currency are decided one after the other and cannot together take
-- the balance below zero. Rating never takes it (charges only raise the
-- balance). Taken after the period's shared lock, always in that order, and
-- as its own statement before PeriodBalance.
SELECT pg_advisory_xact_lock(hashtextextended(@tenant_id::text || '|' || @period::text || '|' || @currency::text, 7366))::text;

-- name: PeriodAdjusted :one
-- The exact sum of a tenant's period's adjustments in one currency, posted
-- before and after the close (a credit's balance; its charges are priced
-- from the period's lines, app.periodTally).
SELECT COALESCE(sum(a.amount), 0)::numeric AS adjusted
FROM adjustment a
WHERE a.tenant_id = @tenant_id AND a.period = @period AND a.currency = @currency;

-- name: MarkPeriodClosing :exec
-- Step 1 of a close, under the period's exclusive lock: from its commit on,
-- usage of the period is late. A period without a row (rating writes none)
-- is created closing; a closing or closed period is left as it is.
INSERT INTO billing_period AS b (tenant_id, period, status, closing_at)
VALUES (@tenant_id, @period, 'closing', now())
ON CONFLICT (tenant_id, period) DO UPDATE SET status = 'closing', closing_at = now()
WHERE b.status = 'open';

-- name: LockPeriod :one
SELECT status FROM billing_period
WHERE tenant_id = @tenant_id AND period = @period
FOR UPDATE;

-- name: StartCloseProgress :exec
-- The chunked tally of a closing period starts at the first charge (the
-- nil UUID sorts before every usage event id; none is nil).
INSERT INTO close_progress (tenant_id, period, after)
VALUES (@tenant_id, @period, '00000000-0000-0000-0000-000000000000')
ON CONFLICT (tenant_id, period) DO NOTHING;

-- name: CloseProgress :one
-- Where the chunked tally of a closing period stands, row-locked: chunks of
-- concurrent closers (they hold the period's exclusive lock too) follow one
-- another from the position the last one committed.
SELECT after::uuid AS after, chunks, charges, done FROM close_progress
WHERE tenant_id = @tenant_id AND period = @period
FOR UPDATE;

-- name: CloseLineSums :many
-- The running tally of a closing period's lines (O(lines) rows), for the
-- next chunk to add to and for the close to read its lines from.
SELECT meter_code, currency, plan_code, price_version, dimensions_key, unpriced, aggregation, dimensions,
       charges, total, peak, amount, digest, distinct_values,
       (latest_at IS NOT NULL)::boolean AS has_latest,
       COALESCE(latest_at, 'epoch')::timestamptz AS latest_at, COALESCE(latest_system, '')::text AS latest_system,
       COALESCE(latest_source, '')::text AS latest_source, COALESCE(latest_quantity, 0)::numeric AS latest_quantity
FROM close_line
WHERE tenant_id = @tenant_id AND period = @period;

-- name: AddCloseValues :many
-- Adds a chunk's distinct values of unique_count lines to the closing
-- period's set; returns the line of each value new to it.
INSERT INTO close_value (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key, unpriced, value)
SELECT @tenant_id, @period, unnest(@meter_codes::text[]), unnest(@currencies::text[]), unnest(@plan_codes::text[]),
       unnest(@price_versions::bigint[]), unnest(@dimensions_keys::text[]), unnest(@unpriceds::boolean[]),
       unnest(@vals::text[])
ON CONFLICT DO NOTHING
RETURNING meter_code, currency, plan_code, price_version, dimensions_key, unpriced;

-- name: PutCloseLines :exec
-- Writes the lines a chunk changed of a closing period's running tally
-- (app.periodTally computed them).
INSERT INTO close_line (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key, unpriced,
                        aggregation, dimensions, charges, total, peak, amount, digest, distinct_values,
                        latest_at, latest_system, latest_source, latest_quantity)
SELECT @tenant_id, @period, u.meter_code, u.currency, u.plan_code, u.price_version, u.dimensions_key, u.unpriced,
       u.aggregation, u.dimensions, u.charges, u.total, u.peak, u.amount, u.digest, u.distinct_values,
       CASE WHEN u.has_latest THEN u.latest_at END, CASE WHEN u.has_latest THEN u.latest_system END,
       CASE WHEN u.has_latest THEN u.latest_source END, CASE WHEN u.has_latest THEN u.latest_quantity END
FROM (SELECT unnest(@meter_codes::text[]) AS meter_code, unnest(@currencies::text[]) AS currency,
             unnest(@plan_codes::text[]) AS plan_code, unnest(@price_versions::bigint[]) AS price_version,
             unnest(@dimensions_keys::text[]) AS dimensions_key, unnest(@unpriceds::boolean[]) AS unpriced,
             unnest(@aggregations::text[]) AS aggregation, unnest(@dimensionses::text[]) AS dimensions,
             unnest(@chargeses::bigint[]) AS charges, unnest(@totals::numeric[]) AS total,
             unnest(@peaks::numeric[]) AS peak, unnest(@amounts::numeric[]) AS amount,
             unnest(@digests::numeric[]) AS digest, unnest(@distinct_valueses::bigint[]) AS distinct_values,
             unnest(@has_latests::boolean[]) AS has_latest, unnest(@latest_ats::timestamptz[]) AS latest_at,
             unnest(@latest_systems::text[]) AS latest_system, unnest(@latest_sources::text[]) AS latest_source,
             unnest(@latest_quantities::numeric[]) AS latest_quantity) u
ON CONFLICT (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key, unpriced, aggregation)
DO UPDATE SET dimensions = EXCLUDED.dimensions, charges = EXCLUDED.charges, total = EXCLUDED.total,
              peak = EXCLUDED.peak, amount = EXCLUDED.amount, digest = EXCLUDED.digest,
              distinct_values = EXCLUDED.distinct_values, latest_at = EXCLUDED.latest_at,
              latest_system = EXCLUDED.latest_system, latest_source = EXCLUDED.latest_source,
              latest_quantity = EXCLUDED.latest_quantity;

-- name: AdvanceCloseProgress :exec
-- Records a chunk in its own transaction: where the next one starts, and
-- done once a chunk came back short.
UPDATE close_progress
SET after = sqlc.arg(after)::uuid, chunks = chunks + 1, charges = charges + sqlc.arg(charges)::bigint,
    done = sqlc.arg(done)::boolean
WHERE tenant_id = @tenant_id AND period = @period;

-- name: ClosingTallies :many
-- CloseTallies from the running tally of the closing period's lines (its
-- charges, O(lines) rows) and the adjustments posted before it closed.
SELECT t.currency::text AS currency,
       sum(t.charges)::bigint AS charges,
       sum(t.charge_amount)::numeric AS charge_amount,
       sum(t.charge_digest)::numeric::text AS charge_digest,
       sum(t.adjustments)::bigint AS adjustments,
       sum(t.adjustment_amount)::numeric AS adjustment_amount,
       sum(t.adjustment_digest)::numeric::text AS adjustment_digest
FROM (
    SELECT l.currency, sum(l.charges) AS charges, sum(l.amount) AS charge_amount, sum(l.digest) AS charge_digest,
           0::bigint AS adjustments, 0::numeric AS adjustment_amount, 0::numeric AS adjustment_digest
    FROM close_line l WHERE l.tenant_id = @tenant_id AND l.period = @period GROUP BY l.currency
    UNION ALL
    SELECT a.currency, 0, 0, 0, count(*), sum(a.amount),
           sum(('x' || encode(substr(sha256(convert_to(a.event_id::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint)
    FROM adjustment a WHERE a.tenant_id = @tenant_id AND a.period = @period AND NOT a.after_close GROUP BY a.currency
) t
GROUP BY t.currency
ORDER BY t.currency;

-- name: ClosedWithValues :many
-- Closed periods whose chunked tally left rows to purge (close_value), at
-- most row_limit.
SELECT p.tenant_id, p.period FROM close_progress p
JOIN billing_period b ON b.tenant_id = p.tenant_id AND b.period = p.period AND b.status = 'closed'
ORDER BY p.tenant_id, p.period
LIMIT sqlc.arg(row_limit)::int;

-- name: PurgeCloseValues :execrows
-- Deletes up to row_limit of a closed period's close_value rows.
DELETE FROM close_value v
WHERE (v.tenant_id, v.period, v.meter_code, v.currency, v.plan_code, v.price_version, v.dimensions_key, v.unpriced, v.value) IN (
    SELECT x.tenant_id, x.period, x.meter_code, x.currency, x.plan_code, x.price_version, x.dimensions_key, x.unpriced, x.value
    FROM close_value x WHERE x.tenant_id = @tenant_id AND x.period = @period
    LIMIT sqlc.arg(row_limit)::int);

-- name: PurgeLineValues :execrows
-- Deletes up to row_limit of a closed period's charge_line_value rows
-- (its parts counted them; nothing reads them once it is closed).
DELETE FROM charge_line_value v
WHERE (v.tenant_id, v.period, v.meter_code, v.currency, v.plan_code, v.price_version, v.dimensions_key, v.unpriced, v.value) IN (
    SELECT x.tenant_id, x.period, x.meter_code, x.currency, x.plan_code, x.price_version, x.dimensions_key, x.unpriced, x.value
    FROM charge_line_value x
    JOIN billing_period b ON b.tenant_id = x.tenant_id AND b.period = x.period AND b.status = 'closed'
    WHERE x.tenant_id = @tenant_id AND x.period = @period
    LIMIT sqlc.arg(row_limit)::int);

-- name: EndCloseProgress :exec
-- The chunked tally of a closed period is purged: its position goes (its
-- close_line rows stay, O(lines), the close's record of its lines).
DELETE FROM close_progress WHERE tenant_id = @tenant_id AND period = @period;

-- name: MarkPeriodClosed :execrows
-- Step 2 of a close, under the period's exclusive lock and the row lock
-- LockPeriod took; closed_by is the actor of the call that finished it.
UPDATE billing_period
SET status = 'closed', closed_at = sqlc.arg(closed_at)::timestamptz, close_event_id = sqlc.arg(close_event_id)::uuid,
    closed_by = sqlc.arg(closed_by)::text
WHERE tenant_id = @tenant_id AND period = @period AND status = 'closing';

-- name: ReconciliationMonths :many
-- ReconciliationMonths lists the months a period's reconciliation reads:
-- the period, the UTC months the usage of its charges rated off-month
-- occurred in, and the periods the usage that occurred in the UTC month of
-- the same name was rated into off-month. A charge is off-month when its
-- period is not the UTC month its usage occurred in: late, or a tenant in
-- another time zone (decision 0014); the partial indexes of migration 0019
-- hold those charges, under the same predicate, with the month and the
-- period in their keys. Each list is a skip scan: one index probe for the
-- next month (or period) after the last one found, so the statement reads
-- a few index entries per month, whatever the number of off-month charges.
WITH RECURSIVE rated_from AS (
    SELECT (SELECT min(date_trunc('month', c.occurred_at AT TIME ZONE 'UTC')) FROM charge c
            WHERE c.tenant_id = @tenant_id AND c.period = @period
              AND (c.late OR make_timestamp(substr(c.period, 1, 4)::int, substr(c.period, 6, 2)::int, 1, 0, 0, 0)
                   <> date_trunc('month', c.occurred_at AT TIME ZONE 'UTC'))) AS month
    UNION ALL
    SELECT (SELECT min(date_trunc('month', c.occurred_at AT TIME ZONE 'UTC')) FROM charge c
            WHERE c.tenant_id = @tenant_id AND c.period = @period
              AND (c.late OR make_timestamp(substr(c.period, 1, 4)::int, substr(c.period, 6, 2)::int, 1, 0, 0, 0)
                   <> date_trunc('month', c.occurred_at AT TIME ZONE 'UTC'))
              AND date_trunc('month', c.occurred_at AT TIME ZONE 'UTC') > r.month)
    FROM rated_from r WHERE r.month IS NOT NULL
), rated_into AS (
    SELECT (SELECT min(c.period) FROM charge c
            WHERE c.tenant_id = @tenant_id
              AND (c.late OR make_timestamp(substr(c.period, 1, 4)::int, substr(c.period, 6, 2)::int, 1, 0, 0, 0)
                   <> date_trunc('month', c.occurred_at AT TIME ZONE 'UTC'))
              AND date_trunc('month', c.occurred_at AT TIME ZONE 'UTC') = @month::timestamp) AS period
    UNION ALL
    SELECT (SELECT min(c.period) FROM charge c
            WHERE c.tenant_id = @tenant_id
              AND (c.late OR make_timestamp(substr(c.period, 1, 4)::int, substr(c.period, 6, 2)::int, 1, 0, 0, 0)
                   <> date_trunc('month', c.occurred_at AT TIME ZONE 'UTC'))
              AND date_trunc('month', c.occurred_at AT TIME ZONE 'UTC') = @month::timestamp
              AND c.period > r.period)
    FROM rated_into r WHERE r.period IS NOT NULL
)
SELECT DISTINCT m.period::text AS period FROM (
    SELECT to_char(f.month, 'YYYY-MM') AS period FROM rated_from f WHERE f.month IS NOT NULL
    UNION ALL
    SELECT i.period FROM rated_into i WHERE i.period IS NOT NULL
    UNION ALL
    SELECT @period::text
) m
ORDER BY 1;

-- name: ReconciliationCharges :many
-- ReconciliationCharges reads a page of a tenant's charges rated into a
-- period or rating usage that occurred in the UTC month of the same name
-- and rated into another period (off-month: late, or a tenant in another
-- time zone), in (usage event id, event id) order after a position.
SELECT * FROM (
    (SELECT c.event_id, c.usage_event_id, c.currency, c.quantity, c.amount, c.period, c.late, c.occurred_at
     FROM charge c
     WHERE c.tenant_id = @tenant_id AND c.period = @period
       AND (c.usage_event_id, c.event_id) > (@after_key::uuid, @after_id::uuid)
     ORDER BY c.usage_event_id, c.event_id
     LIMIT @row_limit)
    UNION ALL
    (SELECT c.event_id, c.usage_event_id, c.currency, c.quantity, c.amount, c.period, c.late, c.occurred_at
     FROM charge c
     WHERE c.tenant_id = @tenant_id AND c.period <> @period
       AND (c.late OR make_timestamp(substr(c.period, 1, 4)::int, substr(c.period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', c.occurred_at AT TIME ZONE 'UTC'))
       AND date_trunc('month', c.occurred_at AT TIME ZONE 'UTC') = @month::timestamp
       AND (c.usage_event_id, c.event_id) > (@after_key::uuid, @after_id::uuid)
     ORDER BY c.usage_event_id, c.event_id
     LIMIT @row_limit)
) s
ORDER BY s.usage_event_id, s.event_id
LIMIT @row_limit;

-- name: ReconciliationAdjustments :many
-- ReconciliationAdjustments reads a page of a tenant's adjustments of a
-- period in event id order after a position.
SELECT event_id, currency, amount, period
FROM adjustment
WHERE tenant_id = @tenant_id AND period = @period AND event_id > @after
ORDER BY event_id
LIMIT @row_limit;

-- name: TenantSettings :many
-- The period settings rows of the given tenants (decision 0014).
SELECT tenant_id, effective_from, time_zone, grace_seconds, tax_rates
FROM tenant_settings
WHERE tenant_id = ANY(@tenant_ids::text[])
ORDER BY tenant_id, effective_from;

-- name: LockTenantSettings :exec
-- A tenant's settings changes are made one at a time.
SELECT pg_advisory_xact_lock(hashtextextended(@tenant_id::text, 7367))::text;

-- name: PutTenantSettings :exec
-- The settings of a tenant from a period not yet begun on: replaces a row
-- already set for that period.
INSERT INTO tenant_settings (tenant_id, effective_from, time_zone, grace_seconds, tax_rates, actor)
VALUES (@tenant_id, @effective_from, @time_zone, @grace_seconds, @tax_rates, @actor)
ON CONFLICT (tenant_id, effective_from) DO UPDATE
    SET time_zone = EXCLUDED.time_zone, grace_seconds = EXCLUDED.grace_seconds, tax_rates = EXCLUDED.tax_rates,
        actor = EXCLUDED.actor, updated_at = now();

-- name: UnclosedPeriods :many
-- The close scheduler's candidates: every (tenant, period) with charges
-- that is not closed, found by a skip scan of charge_line_order (one index
-- probe per distinct pair, whatever the number of charges), and the
-- periods a close left closing; with whether BillingPeriodEnded was
-- published for them and whether they are closing.
WITH RECURSIVE pairs AS (
    (SELECT c.tenant_id, c.period FROM charge c ORDER BY c.tenant_id, c.period LIMIT 1)
    UNION ALL
    SELECT n.tenant_id, n.period
    FROM pairs p, LATERAL (
        SELECT c.tenant_id, c.period FROM charge c
        WHERE (c.tenant_id, c.period) > (p.tenant_id, p.period)
        ORDER BY c.tenant_id, c.period
        LIMIT 1) n
), candidates AS (
    SELECT p.tenant_id, p.period FROM pairs p
    UNION
    SELECT b.tenant_id, b.period FROM billing_period b WHERE b.status = 'closing'
)
SELECT c.tenant_id::text AS tenant_id, c.period::text AS period,
       EXISTS (SELECT 1 FROM period_ended e WHERE e.tenant_id = c.tenant_id AND e.period = c.period)::boolean AS ended,
       EXISTS (SELECT 1 FROM billing_period b
               WHERE b.tenant_id = c.tenant_id AND b.period = c.period AND b.status = 'closing')::boolean AS closing
FROM candidates c
WHERE NOT EXISTS (SELECT 1 FROM billing_period b
                  WHERE b.tenant_id = c.tenant_id AND b.period = c.period AND b.status = 'closed')
ORDER BY c.tenant_id, c.period;

-- name: InsertPeriodEnded :execrows
-- Records that a period went into grace; 0 when it already was.
INSERT INTO period_ended (tenant_id, period, ended_at, closes_at, event_id)
VALUES (@tenant_id, @period, @ended_at, @closes_at, @event_id)
ON CONFLICT DO NOTHING;

-- name: RaiseUsageWatermark :exec
-- Applies a usage watermark: raises its partition's through (never lowers
-- it) and records the topic's partition count it was sent with.
INSERT INTO usage_watermark AS w (partition, partitions, through)
VALUES (@partition, @partitions, @through)
ON CONFLICT (partition) DO UPDATE
SET through = GREATEST(w.through, EXCLUDED.through), partitions = EXCLUDED.partitions, applied_at = now()
WHERE EXCLUDED.through > w.through;

-- name: UsageWatermarks :many
SELECT partition, partitions, through FROM usage_watermark ORDER BY partition;

-- name: RequestClose :one
-- Records a close request under the period's exclusive lock: the first
-- request's time and actor stand. Returns the period's status and when its
-- close was requested.
INSERT INTO billing_period AS b (tenant_id, period, close_requested_at, close_requested_by)
VALUES (@tenant_id, @period, sqlc.arg(requested_at)::timestamptz, sqlc.arg(requested_by)::text)
ON CONFLICT (tenant_id, period) DO UPDATE
SET close_requested_at = COALESCE(b.close_requested_at, EXCLUDED.close_requested_at),
    close_requested_by = COALESCE(b.close_requested_by, EXCLUDED.close_requested_by)
RETURNING b.status, b.close_requested_at::timestamptz AS close_requested_at;

-- name: CloseRequest :one
SELECT close_requested_at::timestamptz AS close_requested_at, COALESCE(close_requested_by, '')::text AS close_requested_by
FROM billing_period
WHERE tenant_id = @tenant_id AND period = @period AND close_requested_at IS NOT NULL;

-- name: RequestedCloses :many
-- The closes requested and waiting (the period still open), for the
-- scheduler to finish.
SELECT tenant_id, period, close_requested_at::timestamptz AS close_requested_at,
       COALESCE(close_requested_by, '')::text AS close_requested_by
FROM billing_period
WHERE status = 'open' AND close_requested_at IS NOT NULL
ORDER BY tenant_id, period;

-- name: InsertPlanEvidence :execrows
-- A plan version as PlanPublished announced it; a replay changes nothing.
INSERT INTO plan_evidence (code, version, name, currency, fixed_fees, minimum_spend, effective_at, plan_id, event_id)
VALUES (@code, @version, @name, @currency, @fixed_fees, @minimum_spend, @effective_at, @plan_id, @event_id)
ON CONFLICT (code, version) DO NOTHING;

-- name: InsertPlanCharges :exec
-- The charges of a plan version, each an entry of its price sheet.
INSERT INTO plan_charge (code, version, meter_code, dimensions, dimensions_key, dimension_count, model, unit_price,
                         tiers, package_size, package_price)
SELECT @code, @version, unnest(@meter_codes::text[]), unnest(@dimensions::text[])::jsonb,
       unnest(@dimensions_keys::text[]), unnest(@dimension_counts::smallint[]), unnest(@models::text[]),
       unnest(@unit_prices::numeric[]), NULLIF(unnest(@tiers::text[]), '')::jsonb,
       NULLIF(unnest(@package_sizes::text[]), '')::numeric, NULLIF(unnest(@package_prices::text[]), '')::numeric
ON CONFLICT DO NOTHING;

-- name: PlanCharges :many
-- The pricing of the given charges of plan versions (code, version, meter,
-- dimensions key), for the ChargeRated of charges under the other models
-- than unit.
SELECT pc.code, pc.version, pc.meter_code, pc.dimensions_key, pc.model, pc.unit_price, pc.tiers,
       COALESCE(pc.package_size, 0)::numeric AS package_size, COALESCE(pc.package_price, 0)::numeric AS package_price
FROM plan_charge pc
WHERE (pc.code, pc.version, pc.meter_code, pc.dimensions_key) IN (
    SELECT unnest(@codes::text[]), unnest(@versions::bigint[]), unnest(@meter_codes::text[]), unnest(@dimensions_keys::text[]));

-- name: LatestPlanVersion :one
-- The latest version billing holds of a plan.
SELECT code, version, currency FROM plan_evidence WHERE code = @code ORDER BY version DESC LIMIT 1;

-- name: LockShardForSubscriptions :one
-- Locks a tenant's schedule shard's row (waiting for a rise of it in
-- progress) and reads what raters have been told of it: a subscription may
-- start or end only after it, and no rise commits before the subscription
-- does, so a rater that knows the shard through t also sees every
-- subscription starting or ending at or before t.
SELECT known_through FROM schedule_shard WHERE shard = sqlc.arg(shard)::int FOR UPDATE;

-- name: SubscriptionsFrom :many
-- The tenant's subscriptions in effect at @at or starting after it, in
-- start order.
SELECT subscription_id, tenant_id, plan_code, starts_at, ends_at, created_at, actor, ended_by
FROM subscription
WHERE tenant_id = @tenant_id AND COALESCE(ends_at, 'infinity'::timestamptz) > @at::timestamptz
ORDER BY starts_at;

-- name: CountLiveSubscriptions :one
-- How many of the tenant's subscriptions are in effect at @at or at any
-- time after it (under the tenant's shard lock: see
-- LockShardForSubscriptions).
SELECT count(*) FROM subscription
WHERE tenant_id = @tenant_id AND COALESCE(ends_at, 'infinity'::timestamptz) > @at::timestamptz;

-- name: InsertSubscription :exec
INSERT INTO subscription (subscription_id, tenant_id, plan_code, starts_at, ends_at, created_at, actor)
VALUES (@subscription_id, @tenant_id, @plan_code, @starts_at, @ends_at, @created_at, @actor);

-- name: EndSubscription :execrows
UPDATE subscription SET ends_at = @ends_at, ended_by = @ended_by
WHERE subscription_id = @subscription_id AND tenant_id = @tenant_id;

-- name: GetSubscription :one
SELECT subscription_id, tenant_id, plan_code, starts_at, ends_at, created_at, actor, ended_by
FROM subscription WHERE subscription_id = @subscription_id AND tenant_id = @tenant_id;

-- name: ListSubscriptions :many
-- A page of the tenant's subscriptions in (starts_at, subscription_id)
-- order after a position (the zero time and nil id: before every one).
SELECT subscription_id, tenant_id, plan_code, starts_at, ends_at, created_at, actor, ended_by
FROM subscription
WHERE tenant_id = @tenant_id AND (starts_at, subscription_id) > (@after_starts_at::timestamptz, @after_id::uuid)
ORDER BY starts_at, subscription_id
LIMIT @max_rows;

-- name: SubscriptionsDuring :many
-- The tenant's subscriptions that hold at some instant of [@since, @until),
-- in start order: what a period's fees are prorated over.
SELECT plan_code, starts_at, ends_at
FROM subscription
WHERE tenant_id = @tenant_id AND starts_at < @until::timestamptz
  AND COALESCE(ends_at, 'infinity'::timestamptz) > @since::timestamptz
ORDER BY starts_at;

-- name: PlanFeeVersions :many
-- Every version billing holds of the given plans, with what each bills per
-- period besides its charges.
SELECT code, version, currency, effective_at, fixed_fees, minimum_spend
FROM plan_evidence
WHERE code = ANY(@codes::text[])
ORDER BY code, version;

-- name: SubscriptionsSince :many
-- The close scheduler's fee candidates: every subscription that holds at
-- some instant at or after @since (the periods it holds in close even
-- without a charge).
SELECT tenant_id, starts_at, ends_at
FROM subscription
WHERE COALESCE(ends_at, 'infinity'::timestamptz) > @since::timestamptz
ORDER BY tenant_id, starts_at;

-- name: PeriodFlags :many
-- For (tenant, period) pairs: whether BillingPeriodEnded was published for
-- each, and whether it is closing or closed.
SELECT u.tenant_id::text AS tenant_id, u.period::text AS period,
       EXISTS (SELECT 1 FROM period_ended e WHERE e.tenant_id = u.tenant_id AND e.period = u.period)::boolean AS ended,
       COALESCE((SELECT b.status FROM billing_period b WHERE b.tenant_id = u.tenant_id AND b.period = u.period), 'open')::text AS status
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period) u;

-- name: PlansKnownFor :one
-- Whether the tenant has a subscription holding at some instant of
-- [@since, @until), and what billing knows of the plans' schedule (shard
-- 16, events.PlanShard): a close of a subscriber's period waits until its
-- fees are priced by every plan version in effect in it.
SELECT EXISTS (SELECT 1 FROM subscription s
               WHERE s.tenant_id = @tenant_id AND s.starts_at < @until::timestamptz
                 AND COALESCE(s.ends_at, 'infinity'::timestamptz) > @since::timestamptz)::boolean AS subscribed,
       COALESCE((SELECT known_through FROM schedule_shard WHERE shard = 16), 'epoch'::timestamptz)::timestamptz AS known_through;

-- name: TenantSubscriptionsSince :many
-- A tenant's subscriptions that hold at some instant at or after @since
-- (SubscriptionsSince for one tenant: the fee periods a close must find
-- closed before it).
SELECT starts_at, ends_at
FROM subscription
WHERE tenant_id = @tenant_id AND COALESCE(ends_at, 'infinity'::timestamptz) > @since::timestamptz
ORDER BY starts_at;

-- name: AddChargeMonths :one
-- Creates the partitions of charge for this month and the next ones
-- (decision 0025); how many it made.
SELECT charge_add_months(@ahead::integer)::integer AS made;
