-- Billing's business SQL. The outbox, inbox and idempotency SQL lives in pkg.

-- name: InsertPriceEvidence :execrows
-- Replicates one price version; a replay of the same version changes nothing.
INSERT INTO price_evidence (tenant_id, meter_code, currency, version, unit_price, effective_at, price_id, event_id)
VALUES (@tenant_id, @meter_code, @currency, @version, @unit_price, @effective_at, @price_id, @event_id)
ON CONFLICT DO NOTHING;

-- name: RateUsage :one
-- Rates one usage fact into @period in one statement: takes the rating lock
-- (every rating transaction takes the period rows it touches in whatever
-- order its batch brings them; one transaction-scoped advisory lock keeps two
-- batches from locking them in opposite orders), reads the price evidence,
-- creates the period row or takes its next version under its row lock while
-- the period is open, and inserts the charge with that version. No row: the
-- price version is missing. A NULL version: the period is closing or closed,
-- nothing was written.
WITH serial AS (
    SELECT pg_advisory_xact_lock(sqlc.arg(lock_key)::bigint) IS NULL AS locked
), price AS (
    SELECT pe.unit_price
    FROM price_evidence pe, serial
    WHERE pe.tenant_id = sqlc.arg(tenant_id)::text
      AND pe.meter_code = sqlc.arg(meter_code)::text
      AND pe.currency = sqlc.arg(currency)::text
      AND pe.version = sqlc.arg(price_version)::bigint
), bp AS (
    INSERT INTO billing_period AS b (tenant_id, period, version)
    SELECT sqlc.arg(tenant_id)::text, sqlc.arg(period)::text, 1 FROM price
    ON CONFLICT (tenant_id, period) DO UPDATE SET version = b.version + 1
    WHERE b.status = 'open'
    RETURNING b.version
), ch AS (
    INSERT INTO charge (charge_id, event_id, usage_event_id, usage_id, tenant_id, meter_code, currency,
                        quantity, unit_price, price_version, amount, period, late, occurred_at, aggregate_version)
    SELECT sqlc.arg(charge_id)::uuid, sqlc.arg(event_id)::uuid, sqlc.arg(usage_event_id)::uuid,
           sqlc.arg(usage_id)::uuid, sqlc.arg(tenant_id)::text, sqlc.arg(meter_code)::text,
           sqlc.arg(currency)::text, sqlc.arg(quantity)::numeric, price.unit_price,
           sqlc.arg(price_version)::bigint, sqlc.arg(quantity)::numeric * price.unit_price,
           sqlc.arg(period)::text, sqlc.arg(late)::boolean, sqlc.arg(occurred_at)::timestamptz, bp.version
    FROM price, bp
)
SELECT price.unit_price, bp.version AS aggregate_version
FROM price LEFT JOIN bp ON true;

-- name: NonOpenPeriodsFrom :many
-- The periods from @period on that no longer take charges, in order.
SELECT period FROM billing_period
WHERE tenant_id = @tenant_id AND period >= @period AND status <> 'open'
ORDER BY period;

-- name: GetCharge :one
SELECT charge_id, event_id, usage_event_id, usage_id, meter_code, currency, quantity, unit_price,
       price_version, amount, period, late, occurred_at, aggregate_version
FROM charge
WHERE tenant_id = @tenant_id AND charge_id = @charge_id;

-- name: ListCharges :many
SELECT charge_id, event_id, usage_event_id, usage_id, meter_code, currency, quantity, unit_price,
       price_version, amount, period, late, occurred_at, aggregate_version
FROM charge
WHERE tenant_id = @tenant_id AND period = @period
ORDER BY aggregate_version;

-- name: NextPeriodVersion :one
-- Takes the next aggregate version of an existing period, whatever its
-- status, under its row lock (adjustments go to closed periods too).
UPDATE billing_period SET version = version + 1
WHERE tenant_id = @tenant_id AND period = @period
RETURNING version;

-- name: InsertAdjustment :exec
INSERT INTO adjustment (adjustment_id, event_id, tenant_id, correction_of, amount, currency, reason,
                        period, aggregate_version)
VALUES (@adjustment_id, @event_id, @tenant_id, @correction_of, @amount, @currency, @reason,
        @period, @aggregate_version);

-- name: MarkPeriodClosing :exec
-- Step 1 of a close: from its commit on, usage of the period is late. A
-- period without activity is created closing; a closing or closed period is
-- left as it is.
INSERT INTO billing_period AS b (tenant_id, period, status, closing_at)
VALUES (@tenant_id, @period, 'closing', now())
ON CONFLICT (tenant_id, period) DO UPDATE SET status = 'closing', closing_at = now()
WHERE b.status = 'open';

-- name: LockPeriod :one
SELECT status, version FROM billing_period
WHERE tenant_id = @tenant_id AND period = @period
FOR UPDATE;

-- name: PeriodTotals :many
-- Counts and exact totals per currency of what a period holds: charges plus
-- adjustments.
SELECT t.currency,
       sum(t.charges)::bigint AS charges,
       sum(t.adjustments)::bigint AS adjustments,
       sum(t.total)::numeric AS total
FROM (
    SELECT c.currency, count(*) AS charges, 0::bigint AS adjustments, sum(c.amount) AS total
    FROM charge c WHERE c.tenant_id = @tenant_id AND c.period = @period GROUP BY c.currency
    UNION ALL
    SELECT a.currency, 0::bigint, count(*), sum(a.amount)
    FROM adjustment a WHERE a.tenant_id = @tenant_id AND a.period = @period GROUP BY a.currency
) t
GROUP BY t.currency
ORDER BY t.currency;

-- name: MarkPeriodClosed :execrows
-- Step 2 of a close, under the row lock LockPeriod took.
UPDATE billing_period
SET status = 'closed', closed_at = sqlc.arg(closed_at)::timestamptz, version = sqlc.arg(version)::bigint,
    close_event_id = sqlc.arg(close_event_id)::uuid
WHERE tenant_id = @tenant_id AND period = @period AND status = 'closing';

-- name: ReconciliationCharges :many
-- ReconciliationCharges lists a tenant's charges rated into the given
-- periods or rating usage that occurred in them (UTC months).
SELECT event_id, usage_event_id, currency, quantity, amount, period,
       to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM')::text AS occurred_period
FROM charge
WHERE tenant_id = @tenant_id
  AND (period = ANY(@periods::text[])
       OR to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM') = ANY(@periods::text[]))
ORDER BY event_id;

-- name: ReconciliationAdjustments :many
SELECT event_id, currency, amount, period
FROM adjustment
WHERE tenant_id = @tenant_id AND period = ANY(@periods::text[])
ORDER BY event_id;
