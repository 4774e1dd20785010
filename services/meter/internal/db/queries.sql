-- name: LockPriceSeries :one
-- Creates the series on its first activation and locks its row until the
-- transaction ends; concurrent activations of the series wait here and then
-- see the version the previous one committed.
INSERT INTO price_series (tenant_id, meter_code, currency)
VALUES (@tenant_id, @meter_code, @currency)
ON CONFLICT (tenant_id, meter_code, currency)
    DO UPDATE SET last_version = price_series.last_version
RETURNING last_version, last_effective_at;

-- name: LockScheduleShard :one
-- Locks a schedule shard's row (created when missing) until the
-- transaction ends: an activation takes it after its series' row, so the
-- shard's activations are numbered in commit order and none commits
-- across a watermark the publisher is raising.
INSERT INTO schedule_shard (shard)
VALUES (sqlc.arg(shard)::int)
ON CONFLICT (shard) DO UPDATE SET last_seq = schedule_shard.last_seq
RETURNING last_seq, known_through;

-- name: AdvanceScheduleShard :execrows
-- Records a shard's next activation and the watermark its PriceActivated
-- carries (never lowered).
UPDATE schedule_shard
SET last_seq = @seq, known_through = GREATEST(known_through, @known_through::timestamptz)
WHERE shard = @shard AND last_seq + 1 = @seq;

-- name: LockTenantSeries :exec
-- LockTenantSeries serialises, until commit, a tenant's activations, so
-- that its series, price entries and versions of a month are counted
-- against their limits one activation at a time. Taken after the series'
-- row and before the schedule shard's, by every activation.
SELECT pg_advisory_xact_lock(hashtextextended('meter.series:' || @tenant_id::text, 0));

-- name: CountTenantSeries :one
-- CountTenantSeries counts the tenant's price series, at most @most of them.
SELECT count(*) FROM (SELECT 1 FROM price_series WHERE tenant_id = @tenant_id LIMIT @most) s;

-- name: AddPriceEntry :execrows
-- AddPriceEntry records a series' dimension set ({} for its default): 1
-- row when the set is new to the series, 0 when a version named it before.
INSERT INTO price_entry (tenant_id, meter_code, currency, dimensions)
VALUES (@tenant_id, @meter_code, @currency, sqlc.arg(dimensions)::jsonb)
ON CONFLICT DO NOTHING;

-- name: CountTenantEntries :one
-- CountTenantEntries counts the tenant's price entries, at most @most.
SELECT count(*) FROM (SELECT 1 FROM price_entry WHERE tenant_id = @tenant_id LIMIT @most) e;

-- name: CountTenantVersionsIn :one
-- CountTenantVersionsIn counts the tenant's price versions taking effect
-- in [@from_at, @until_at), at most @most.
SELECT count(*) FROM (
    SELECT 1 FROM price
    WHERE tenant_id = @tenant_id AND effective_at >= @from_at AND effective_at < @until_at
    LIMIT @most) v;

-- name: CountPlanVersionsIn :one
-- CountPlanVersionsIn counts the plan's versions taking effect in
-- [@from_at, @until_at), at most @most.
SELECT count(*) FROM (
    SELECT 1 FROM plan_version
    WHERE code = @code AND effective_at >= @from_at AND effective_at < @until_at
    LIMIT @most) v;

-- name: AdvancePriceSeries :execrows
-- Records the series' new version.
UPDATE price_series
SET last_version = @version, last_effective_at = @effective_at
WHERE tenant_id = @tenant_id AND meter_code = @meter_code AND currency = @currency
  AND last_version + 1 = @version;

-- name: EnsureScheduleShards :exec
-- Creates the rows of shards 0 to @last_shard that do not exist yet.
INSERT INTO schedule_shard (shard)
SELECT g FROM generate_series(0, @last_shard::int) g
ON CONFLICT (shard) DO NOTHING;

-- name: LockShardsToPublish :many
-- The shards whose published watermark runs out before @refresh_before (or
-- that have none yet), soonest first, locked: an activation in one of them
-- waits until the new watermark is committed, and then sees it. Shards
-- another publisher or an activation holds are skipped; the next round
-- takes them.
SELECT shard, last_seq, known_through
FROM schedule_shard
WHERE known_through IS NULL OR known_through < @refresh_before
ORDER BY known_through NULLS FIRST, shard
FOR UPDATE SKIP LOCKED;

-- name: RaiseShardsKnownThrough :exec
-- Raises the watermark of locked shards; never lowers it.
UPDATE schedule_shard
SET known_through = @known_through
WHERE shard = ANY(@shards::int[])
  AND (known_through IS NULL OR known_through < @known_through);

-- name: InsertPrice :exec
INSERT INTO price (price_id, tenant_id, meter_code, currency, version, model, unit_price, tiers,
                   package_size, package_price, effective_at, activated_at, event_id, actor, dimensions, schedule_seq)
VALUES (@price_id, @tenant_id, @meter_code, @currency, @version, @model, sqlc.narg(unit_price), sqlc.narg(tiers),
        sqlc.narg(package_size), sqlc.narg(package_price), @effective_at, @activated_at, @event_id, sqlc.arg(actor)::text,
        @dimensions, sqlc.arg(schedule_seq)::bigint);

-- name: SeriesDimensions :many
-- The dimension sets the versions of a series name so far (the series is
-- locked by the activation reading them): a new dimension price must not
-- overlap one of them (ambiguous_price).
SELECT DISTINCT dimensions FROM price
WHERE tenant_id = @tenant_id AND meter_code = @meter_code AND currency = @currency;

-- name: ListPrices :many
-- ListPrices reads a page of a tenant's price versions in (meter_code,
-- currency, version) order, after that keyset position (the zero position,
-- ('', '', 0), is before every version). price_version_key serves it: one
-- index range scan from the position, whatever the page.
SELECT price_id, tenant_id, meter_code, currency, version, model, unit_price, tiers, package_size,
       package_price, effective_at, activated_at, event_id, actor, dimensions
FROM price
WHERE tenant_id = @tenant_id
  AND (meter_code, currency, version) > (@after_meter_code::text, @after_currency::text, @after_version::bigint)
ORDER BY meter_code, currency, version
LIMIT @max_rows;

-- name: ListMeterPrices :many
-- ListMeterPrices is ListPrices of one meter: (currency, version) order
-- after that position, from the same index.
SELECT price_id, tenant_id, meter_code, currency, version, model, unit_price, tiers, package_size,
       package_price, effective_at, activated_at, event_id, actor, dimensions
FROM price
WHERE tenant_id = @tenant_id AND meter_code = @meter_code
  AND (currency, version) > (@after_currency::text, @after_version::bigint)
ORDER BY currency, version
LIMIT @max_rows;

-- name: ReconciliationPrices :many
-- ReconciliationPrices reads a page of a tenant's price versions in price
-- id order after a position: the pricing reconciliation holds each invoice
-- line to. A tenant has a price version per activation: a few rows.
SELECT price_id, meter_code, currency, version, model, unit_price, tiers, package_size, package_price
FROM price
WHERE tenant_id = @tenant_id AND price_id > @after
ORDER BY price_id
LIMIT @max_rows;

-- name: InsertMeter :execrows
-- Defines a meter unless its code or its eventType is taken (0 rows): a
-- concurrent definition of either waits here for the other transaction and
-- then counts as taken.
INSERT INTO meter (code, name, aggregation, value_property, dimensions, event_type, implied, defined_at, actor, event_id)
VALUES (@code, @name, @aggregation, sqlc.narg(value_property), @dimensions::text[], @event_type, @implied, @defined_at,
        sqlc.narg(actor), sqlc.narg(event_id))
ON CONFLICT DO NOTHING;

-- name: GetMeter :one
SELECT code, name, aggregation, value_property, dimensions, event_type, implied, defined_at, actor, event_id
FROM meter WHERE code = @code;

-- name: MeterOfEventType :one
SELECT code FROM meter WHERE event_type = @event_type;

-- name: ListMeters :many
-- A page of the catalog in code order, after a code ('' is before every
-- one), from the primary key.
SELECT code, name, aggregation, value_property, dimensions, event_type, implied, defined_at, actor, event_id
FROM meter
WHERE code > @after_code::text
ORDER BY code
LIMIT @max_rows;

-- name: LockUnpublishedMeters :many
-- Meters defined without their MeterDefined (the migration's implied ones),
-- locked; rows another instance holds are skipped, its round takes them.
SELECT code, name, aggregation, value_property, dimensions, event_type, implied, defined_at, actor, event_id
FROM meter
WHERE event_id IS NULL
ORDER BY code
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: SetMeterEventID :execrows
UPDATE meter SET event_id = @event_id WHERE code = @code AND event_id IS NULL;

-- name: LockPlan :one
-- Locks a plan's row (created when missing) until the transaction ends: a
-- new version is published under it, after its code's versions so far.
INSERT INTO plan (code)
VALUES (@code)
ON CONFLICT (code) DO UPDATE SET last_version = plan.last_version
RETURNING last_version, last_effective_at;

-- name: AdvancePlan :execrows
UPDATE plan SET last_version = @version, last_effective_at = @effective_at
WHERE code = @code AND last_version + 1 = @version;

-- name: InsertPlanVersion :exec
INSERT INTO plan_version (plan_id, code, version, name, currency, fixed_fees, charges, minimum_spend,
                          effective_at, published_at, schedule_seq, actor, event_id)
VALUES (@plan_id, @code, @version, @name, @currency, @fixed_fees, @charges, @minimum_spend,
        @effective_at, @published_at, @schedule_seq, @actor, @event_id);

-- name: ListLatestPlans :many
-- The latest version of each plan, in code order after a code ('' is
-- before every one).
SELECT v.plan_id, v.code, v.version, v.name, v.currency, v.fixed_fees, v.charges, v.minimum_spend,
       v.effective_at, v.published_at, v.actor, v.event_id
FROM plan p
JOIN plan_version v ON v.code = p.code AND v.version = p.last_version
WHERE p.code > @after_code::text
ORDER BY p.code
LIMIT @max_rows;

-- name: ListPlanVersions :many
-- A plan's versions in version order, after a version (0 is before every one).
SELECT plan_id, code, version, name, currency, fixed_fees, charges, minimum_spend,
       effective_at, published_at, actor, event_id
FROM plan_version
WHERE code = @code AND version > @after_version::bigint
ORDER BY version
LIMIT @max_rows;

-- name: ReconciliationPlans :many
-- A page of plan versions in plan id order after a position: the pricing
-- a subscriber's plan lines are held to. Few: a catalog's plans.
SELECT plan_id, code, version, currency, charges, fixed_fees, minimum_spend
FROM plan_version
WHERE plan_id > @after
ORDER BY plan_id
LIMIT @max_rows;
