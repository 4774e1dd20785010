-- name: Project :exec
-- Project records one event and its summary delta, in one round trip. A
-- second projection of the same event is a unique violation of
-- projected_event_pkey (a duplicate).
WITH ev AS (
    INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
                                 occurred_at, subject_id, origin_event_id, period, meter_code, currency,
                                 quantity, unit_price, amount, payload)
    VALUES (@event_id, @event_type, @tenant_id, @aggregate_type, @aggregate_id, @aggregate_version,
            @occurred_at, @subject_id, sqlc.narg(origin_event_id), sqlc.narg(period), sqlc.narg(meter_code),
            sqlc.narg(currency), sqlc.narg(quantity), sqlc.narg(unit_price), sqlc.narg(amount), @payload)
    RETURNING tenant_id, occurred_at
)
INSERT INTO summary_delta (tenant_id, kind, key, amount, occurred_at)
SELECT ev.tenant_id, @delta_kind::text, @delta_key::text, @delta_amount::numeric, ev.occurred_at FROM ev;

-- name: ProjectInvoiceLines :exec
INSERT INTO projected_invoice_line (invoice_event_id, invoice_id, tenant_id, origin_event_id, kind, amount)
SELECT @invoice_event_id::uuid, @invoice_id::uuid, @tenant_id::text,
       unnest(@origin_event_ids::uuid[]), unnest(@kinds::text[]), unnest(@amounts::numeric[]);

-- name: LockTenantSummary :exec
-- LockTenantSummary serialises the folds of one tenant (until commit).
SELECT pg_advisory_xact_lock(hashtextextended('query.tenant_summary:' || @tenant_id::text, 0));

-- name: FoldDeltas :exec
-- FoldDeltas moves a tenant's pending deltas into its totals and summary.
-- Call it after LockTenantSummary, in the same transaction.
WITH moved AS (
    DELETE FROM summary_delta d WHERE d.tenant_id = @tenant_id::text
    RETURNING d.kind, d.key, d.amount, d.occurred_at
), totals AS (
    INSERT INTO tenant_total (tenant_id, kind, key, amount, events)
    SELECT @tenant_id::text, m.kind, m.key, sum(m.amount), count(*)
    FROM moved m WHERE m.kind <> 'seen'
    GROUP BY m.kind, m.key
    ON CONFLICT (tenant_id, kind, key) DO UPDATE
    SET amount = tenant_total.amount + EXCLUDED.amount, events = tenant_total.events + EXCLUDED.events
    RETURNING 1
)
INSERT INTO tenant_summary (tenant_id, events, last_event_at)
SELECT @tenant_id::text, count(*), max(m.occurred_at) FROM moved m
HAVING count(*) > 0
ON CONFLICT (tenant_id) DO UPDATE
SET events = tenant_summary.events + EXCLUDED.events,
    last_event_at = GREATEST(tenant_summary.last_event_at, EXCLUDED.last_event_at);

-- name: GetTenantSummary :one
SELECT tenant_id, events, last_event_at FROM tenant_summary WHERE tenant_id = @tenant_id;

-- name: ListTenantTotals :many
SELECT kind, key, amount, events FROM tenant_total WHERE tenant_id = @tenant_id ORDER BY kind, key;
