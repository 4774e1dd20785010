-- Billing's business SQL. The outbox, inbox and idempotency SQL lives in pkg.

-- name: InsertPriceEvidence :execrows
-- Replicates one price version; a replay of the same version changes nothing.
INSERT INTO price_evidence (tenant_id, meter_code, currency, version, unit_price, effective_at, price_id, event_id,
                            model, tiers, package_size, package_price)
VALUES (@tenant_id, @meter_code, @currency, @version, @unit_price, @effective_at, @price_id, @event_id,
        @model, sqlc.narg(tiers)::jsonb, @package_size, @package_price)
ON CONFLICT DO NOTHING;

-- name: HasPriceVersion :one
-- Whether billing holds a version of a series (and so every version before
-- it: the inbox applies a series' versions in order).
SELECT EXISTS (SELECT 1 FROM price_evidence
               WHERE tenant_id = @tenant_id AND meter_code = @meter_code AND currency = @currency
                 AND version = @version)::boolean AS held;

-- name: TryLockPriceSchedule :one
-- Locks a series' schedule row for the transaction unless another
-- transaction holds it: busy is true when the row exists and is locked
-- elsewhere. The caller then defers instead of waiting, since waiting could
-- deadlock: one batch may raise several series in an order that another
-- batch, on another partition, reverses (a series' watermarks are keyed by
-- their knownThrough, so they spread over partitions).
WITH mine AS (
    SELECT 1 FROM price_schedule s
    WHERE s.tenant_id = @tenant_id AND s.meter_code = @meter_code AND s.currency = @currency
    FOR UPDATE SKIP LOCKED
)
SELECT (EXISTS (SELECT 1 FROM price_schedule s
                WHERE s.tenant_id = @tenant_id AND s.meter_code = @meter_code AND s.currency = @currency)
        AND NOT EXISTS (SELECT 1 FROM mine))::boolean AS busy;

-- name: RaiseKnownThrough :one
-- Raises what billing knows of a series' schedule to @known_through (never
-- lowers it) and returns what it knew before (NULL: nothing) and whether it
-- rose (had false: it knew nothing). Called only once billing holds every
-- version the watermark names.
WITH prev AS (
    SELECT s.known_through FROM price_schedule s
    WHERE s.tenant_id = @tenant_id AND s.meter_code = @meter_code AND s.currency = @currency
    FOR UPDATE
), up AS (
    INSERT INTO price_schedule AS s (tenant_id, meter_code, currency, known_through)
    VALUES (@tenant_id, @meter_code, @currency, @known_through)
    ON CONFLICT (tenant_id, meter_code, currency) DO UPDATE
        SET known_through = EXCLUDED.known_through, updated_at = now()
        WHERE s.known_through < EXCLUDED.known_through
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM prev)::boolean AS had,
       COALESCE((SELECT known_through FROM prev), 'epoch')::timestamptz AS previous,
       EXISTS (SELECT 1 FROM up)::boolean AS raised;

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

-- name: RateUsage :one
-- Rates one usage fact into @period in one statement, under the period's
-- shared lock: reads what billing knows of the series' schedule, the price
-- version in effect at the fact's occurrence and the period's status, and
-- inserts the charge when the schedule is known through the occurrence, a
-- version is in effect and the period is open. A period without a row is
-- open: only a close writes period rows (MarkPeriodClosing, under the
-- exclusive lock), so raters never write a row another rater may be
-- writing, and a rating transaction needs no second connection. known
-- false: the schedule is not known through the occurrence yet (wait);
-- priced false: no version is in effect then (before the first); a status
-- other than open: nothing was written.
WITH s AS (
    SELECT ps.known_through FROM price_schedule ps
    WHERE ps.tenant_id = sqlc.arg(tenant_id)::text AND ps.meter_code = sqlc.arg(meter_code)::text
      AND ps.currency = sqlc.arg(currency)::text
), price AS (
    -- Versions take effect in version order: the highest version already
    -- in effect is the one. Read only when the schedule is known.
    SELECT pe.version, pe.unit_price, pe.model
    FROM price_evidence pe, s
    WHERE pe.tenant_id = sqlc.arg(tenant_id)::text
      AND pe.meter_code = sqlc.arg(meter_code)::text
      AND pe.currency = sqlc.arg(currency)::text
      AND pe.effective_at <= sqlc.arg(occurred_at)::timestamptz
      AND sqlc.arg(occurred_at)::timestamptz < s.known_through
    ORDER BY pe.version DESC
    LIMIT 1
), bp AS (
    SELECT b.status FROM billing_period b
    WHERE b.tenant_id = sqlc.arg(tenant_id)::text AND b.period = sqlc.arg(period)::text
), ch AS (
    INSERT INTO charge (charge_id, event_id, usage_event_id, usage_id, tenant_id, meter_code, currency,
                        quantity, unit_price, price_version, amount, period, late, occurred_at, model)
    SELECT sqlc.arg(charge_id)::uuid, sqlc.arg(event_id)::uuid, sqlc.arg(usage_event_id)::uuid,
           sqlc.arg(usage_id)::uuid, sqlc.arg(tenant_id)::text, sqlc.arg(meter_code)::text,
           sqlc.arg(currency)::text, sqlc.arg(quantity)::numeric, price.unit_price,
           price.version, sqlc.arg(quantity)::numeric * price.unit_price,
           sqlc.arg(period)::text, sqlc.arg(late)::boolean, sqlc.arg(occurred_at)::timestamptz, price.model
    FROM price LEFT JOIN bp ON true
    WHERE COALESCE(bp.status, 'open') = 'open'
)
SELECT COALESCE((SELECT sqlc.arg(occurred_at)::timestamptz < s.known_through FROM s), false)::boolean AS known,
       EXISTS (SELECT 1 FROM price)::boolean AS priced,
       COALESCE((SELECT price.version FROM price), 0)::bigint AS price_version,
       COALESCE((SELECT price.unit_price FROM price), 0)::numeric AS unit_price,
       COALESCE((SELECT price.model FROM price), 'unit')::text AS model,
       COALESCE((SELECT bp.status FROM bp), 'open')::text AS status;

-- name: LockPeriodsShared :exec
-- LockPeriodsShared takes the advisory locks of LockPeriodShared of every
-- distinct (tenant, period) pair given, shared, in the order of their keys
-- (so raters holding several never wait for each other in a cycle). Run it
-- as its own statement, before the statement that reads the statuses.
SELECT count(pg_advisory_xact_lock_shared(l.k))
FROM (SELECT DISTINCT hashtextextended(u.tenant_id || '|' || u.period, 7365) AS k
      FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period) u
      ORDER BY 1) l;

-- name: RateUsages :many
-- RateUsages rates usage facts, each into its period, in one statement,
-- under the periods' shared locks (LockPeriodsShared): RateUsage for every
-- fact at once. It returns per fact, in the order given, whether the
-- series' schedule is known through its occurrence, whether a version is in
-- effect then, that version and its unit price, and its period's status;
-- the charges of the known, priced facts in an open period are inserted, in
-- that order.
WITH u AS (
    SELECT unnest(@tenant_ids::text[])          AS tenant_id,
           unnest(@meter_codes::text[])         AS meter_code,
           unnest(@currencies::text[])          AS currency,
           unnest(@periods::text[])             AS period,
           unnest(@charge_ids::uuid[])          AS charge_id,
           unnest(@event_ids::uuid[])           AS event_id,
           unnest(@usage_event_ids::uuid[])     AS usage_event_id,
           unnest(@usage_ids::uuid[])           AS usage_id,
           unnest(@quantities::numeric[])       AS quantity,
           unnest(@occurred_ats::timestamptz[]) AS occurred_at,
           generate_series(1, cardinality(@tenant_ids::text[])) AS n
), r AS (
    -- One index probe per fact and lookup: see inbox's lookups.
    SELECT u.*,
           COALESCE(u.occurred_at < ps.known_through, false) AS known,
           p.version AS price_version, p.unit_price, p.model,
           COALESCE((SELECT b.status FROM billing_period b
                     WHERE b.tenant_id = u.tenant_id AND b.period = u.period), 'open') AS status
    FROM u
    LEFT JOIN price_schedule ps
           ON ps.tenant_id = u.tenant_id AND ps.meter_code = u.meter_code AND ps.currency = u.currency
    LEFT JOIN LATERAL (
        SELECT pe.version, pe.unit_price, pe.model FROM price_evidence pe
        WHERE pe.tenant_id = u.tenant_id AND pe.meter_code = u.meter_code
          AND pe.currency = u.currency AND pe.effective_at <= u.occurred_at
        ORDER BY pe.version DESC
        LIMIT 1) p ON u.occurred_at < ps.known_through
), ch AS (
    INSERT INTO charge (charge_id, event_id, usage_event_id, usage_id, tenant_id, meter_code, currency,
                        quantity, unit_price, price_version, amount, period, late, occurred_at, model)
    SELECT r.charge_id, r.event_id, r.usage_event_id, r.usage_id, r.tenant_id, r.meter_code, r.currency,
           r.quantity, r.unit_price, r.price_version, r.quantity * r.unit_price, r.period, false, r.occurred_at, r.model
    FROM r
    WHERE r.known AND r.price_version IS NOT NULL AND r.status = 'open'
    ORDER BY r.n
)
SELECT r.known::boolean AS known, (r.price_version IS NOT NULL)::boolean AS priced,
       COALESCE(r.price_version, 0)::bigint AS price_version, COALESCE(r.unit_price, 0)::numeric AS unit_price,
       COALESCE(r.model, 'unit')::text AS model, r.status::text AS status
FROM r ORDER BY r.n;

-- name: VersionPricings :many
-- The pricing of the given versions of the tenant's series, for the
-- ChargeRated of charges under the other models than unit.
SELECT pe.meter_code, pe.currency, pe.version, pe.model, pe.unit_price, pe.tiers, pe.package_size, pe.package_price
FROM price_evidence pe
WHERE pe.tenant_id = @tenant_id
  AND (pe.meter_code, pe.currency, pe.version) IN (
      SELECT unnest(@meter_codes::text[]), unnest(@currencies::text[]), unnest(@versions::bigint[]));

-- name: PeriodLines :many
-- A period's charges per meter, currency and price version (what invoice
-- lines will be), with each version's pricing: the running estimate.
-- Bounded by meters x versions whatever the number of charges.
SELECT c.meter_code, c.currency, c.price_version, sum(c.quantity)::numeric AS quantity,
       sum(c.amount)::numeric AS amount, pe.model, pe.unit_price, pe.tiers, pe.package_size, pe.package_price
FROM charge c
JOIN price_evidence pe ON pe.tenant_id = c.tenant_id AND pe.meter_code = c.meter_code
                      AND pe.currency = c.currency AND pe.version = c.price_version
WHERE c.tenant_id = @tenant_id AND c.period = @period
GROUP BY c.meter_code, c.currency, c.price_version, pe.model, pe.unit_price, pe.tiers, pe.package_size, pe.package_price
ORDER BY c.meter_code, c.currency, c.price_version;

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
       price_version, amount, period, late, occurred_at, model
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
       price_version, amount, period, late, occurred_at, model
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
-- from PeriodLines).
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

-- name: CloseTallies :many
-- What a close counts, per currency: the period's charges and the
-- adjustments posted before it closed, each counted, summed exactly and
-- digested (package digest: the sum of a term per event id, so any copy of
-- the set computes the same whatever order it came in). One pass over the
-- period's rows in SQL: bounded memory whatever the volume.
SELECT t.currency::text AS currency,
       sum(t.charges)::bigint AS charges,
       sum(t.charge_amount)::numeric AS charge_amount,
       sum(t.charge_digest)::numeric::text AS charge_digest,
       sum(t.adjustments)::bigint AS adjustments,
       sum(t.adjustment_amount)::numeric AS adjustment_amount,
       sum(t.adjustment_digest)::numeric::text AS adjustment_digest
FROM (
    SELECT c.currency, count(*) AS charges, sum(c.amount) AS charge_amount,
           sum(('x' || encode(substr(sha256(convert_to(c.event_id::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint) AS charge_digest,
           0::bigint AS adjustments, 0::numeric AS adjustment_amount, 0::numeric AS adjustment_digest
    FROM charge c WHERE c.tenant_id = @tenant_id AND c.period = @period GROUP BY c.currency
    UNION ALL
    SELECT a.currency, 0, 0, 0, count(*), sum(a.amount),
           sum(('x' || encode(substr(sha256(convert_to(a.event_id::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint)
    FROM adjustment a WHERE a.tenant_id = @tenant_id AND a.period = @period AND NOT a.after_close GROUP BY a.currency
) t
GROUP BY t.currency
ORDER BY t.currency;

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
-- another time zone (decision 0014); the partial indexes of migration 0008
-- hold those charges, under the same predicate.
SELECT DISTINCT m.period::text AS period FROM (
    SELECT to_char(c.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM') AS period
    FROM charge c WHERE c.tenant_id = @tenant_id AND c.period = @period
      AND (c.late OR make_timestamp(substr(c.period, 1, 4)::int, substr(c.period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', c.occurred_at AT TIME ZONE 'UTC'))
    UNION ALL
    SELECT c.period FROM charge c
    WHERE c.tenant_id = @tenant_id
      AND (c.late OR make_timestamp(substr(c.period, 1, 4)::int, substr(c.period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', c.occurred_at AT TIME ZONE 'UTC'))
      AND date_trunc('month', c.occurred_at AT TIME ZONE 'UTC') = @month::timestamp
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
SELECT tenant_id, effective_from, time_zone, grace_seconds
FROM tenant_settings
WHERE tenant_id = ANY(@tenant_ids::text[])
ORDER BY tenant_id, effective_from;

-- name: LockTenantSettings :exec
-- A tenant's settings changes are made one at a time.
SELECT pg_advisory_xact_lock(hashtextextended(@tenant_id::text, 7367))::text;

-- name: PutTenantSettings :exec
-- The settings of a tenant from a period not yet begun on: replaces a row
-- already set for that period.
INSERT INTO tenant_settings (tenant_id, effective_from, time_zone, grace_seconds, actor)
VALUES (@tenant_id, @effective_from, @time_zone, @grace_seconds, @actor)
ON CONFLICT (tenant_id, effective_from) DO UPDATE
    SET time_zone = EXCLUDED.time_zone, grace_seconds = EXCLUDED.grace_seconds, actor = EXCLUDED.actor,
        updated_at = now();

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
