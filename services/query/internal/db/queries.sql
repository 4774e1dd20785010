-- name: Project :many
-- Project records events and their summary deltas, in one statement, in
-- the order given. An event projected before is left as it is (ON CONFLICT
-- DO NOTHING on projected_event_pkey) and gets no delta; the event ids
-- stored are returned. Nullable columns come as text, an empty string for NULL.
WITH u AS (
    SELECT unnest(@event_ids::uuid[])                AS event_id,
           unnest(@event_types::text[])              AS event_type,
           unnest(@tenant_ids::text[])               AS tenant_id,
           unnest(@aggregate_types::text[])          AS aggregate_type,
           unnest(@aggregate_ids::text[])            AS aggregate_id,
           unnest(@aggregate_versions::bigint[])     AS aggregate_version,
           unnest(@occurred_ats::timestamptz[])      AS occurred_at,
           unnest(@subject_ids::text[])              AS subject_id,
           unnest(@origin_event_ids::text[])         AS origin_event_id,
           unnest(@periods::text[])                  AS period,
           unnest(@meter_codes::text[])              AS meter_code,
           unnest(@currencies::text[])               AS currency,
           unnest(@quantities::text[])               AS quantity,
           unnest(@unit_prices::text[])              AS unit_price,
           unnest(@amounts::text[])                  AS amount,
           unnest(@payloads::jsonb[])                AS payload,
           unnest(@delta_kinds::text[])              AS delta_kind,
           unnest(@delta_keys::text[])               AS delta_key,
           unnest(@delta_amounts::numeric[])         AS delta_amount,
           generate_series(1, cardinality(@event_ids::uuid[])) AS n
), ev AS (
    INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
                                 occurred_at, subject_id, origin_event_id, period, meter_code, currency,
                                 quantity, unit_price, amount, payload)
    SELECT u.event_id, u.event_type, u.tenant_id, u.aggregate_type, u.aggregate_id, u.aggregate_version,
           u.occurred_at, NULLIF(u.subject_id, '')::uuid, NULLIF(u.origin_event_id, '')::uuid,
           NULLIF(u.period, ''), NULLIF(u.meter_code, ''), NULLIF(u.currency, ''),
           NULLIF(u.quantity, '')::numeric, NULLIF(u.unit_price, '')::numeric, NULLIF(u.amount, '')::numeric,
           u.payload
    FROM u ORDER BY u.n
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
), delta AS (
    INSERT INTO summary_delta (tenant_id, kind, key, amount, occurred_at)
    SELECT u.tenant_id, u.delta_kind, u.delta_key, u.delta_amount, u.occurred_at
    FROM u JOIN ev ON ev.event_id = u.event_id
    ORDER BY u.n
    RETURNING 1
)
SELECT ev.event_id FROM ev;

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

-- name: ListPendingTotals :many
-- ListPendingTotals sums a tenant's deltas not folded yet, per kind and key,
-- for a read that adds them to the folded totals (in one snapshot).
SELECT kind, key, sum(amount)::numeric AS amount, count(*) AS events
FROM summary_delta WHERE tenant_id = @tenant_id AND kind <> 'seen'
GROUP BY kind, key ORDER BY kind, key;

-- name: GetPendingSummary :one
-- GetPendingSummary counts a tenant's deltas not folded yet and their latest
-- occurredAt (NULL when there is none).
SELECT count(*) AS events, max(occurred_at) AS last_event_at
FROM summary_delta WHERE tenant_id = @tenant_id;

-- name: ListTenantsToFold :many
-- ListTenantsToFold returns the tenants of the oldest pending deltas, for the
-- background folder.
SELECT DISTINCT o.tenant_id FROM (
    SELECT d.tenant_id FROM summary_delta d ORDER BY d.seq LIMIT @scan::int
) o;

-- name: CountPendingDeltas :one
SELECT count(*) FROM summary_delta;

-- name: GetTenantSummary :one
SELECT tenant_id, events, last_event_at FROM tenant_summary WHERE tenant_id = @tenant_id;

-- name: ListTenantTotals :many
SELECT kind, key, amount, events FROM tenant_total WHERE tenant_id = @tenant_id ORDER BY kind, key;

-- name: InsertQuarantineNotice :exec
-- InsertQuarantineNotice records an EventQuarantined. The same message
-- announced again is kept once; the same notice again is a unique violation
-- of quarantine_notice_event_key (a duplicate).
INSERT INTO quarantine_notice (event_id, service, quarantined_event_id, event_type, tenant_id, reason, raw_sha256,
                               topic, partition, "offset", quarantined_at)
VALUES (@event_id, @service, sqlc.narg(quarantined_event_id), @event_type, @tenant_id, @reason, @raw_sha256,
        @topic, @partition, @offset_, @quarantined_at)
ON CONFLICT (service, raw_sha256) DO NOTHING;

-- name: ListQuarantineNotices :many
-- ListQuarantineNotices pages through the quarantine view in arrival
-- order. A message is redriven once a redrive of its event completed with
-- an outcome other than quarantined or not_found.
SELECT n.seq, n.service, n.quarantined_event_id, n.event_type, n.tenant_id, n.reason, n.raw_sha256,
       n.topic, n.partition, n."offset", n.quarantined_at,
       EXISTS (SELECT 1 FROM redrive_audit a
               WHERE a.service = n.service AND a.event_id = n.quarantined_event_id AND a.state = 'completed'
                 AND a.action = 'redecide' AND a.outcome IN ('applied', 'duplicate', 'deferred'))::bool AS redriven
FROM quarantine_notice n
WHERE n.seq > @after
  AND (@service::text = '' OR n.service = @service::text)
  AND (@reason::text = '' OR n.reason = @reason::text)
  AND (@tenant_id::text = '' OR n.tenant_id = @tenant_id::text)
  AND (@include_redriven::bool OR NOT EXISTS (
          SELECT 1 FROM redrive_audit a
          WHERE a.service = n.service AND a.event_id = n.quarantined_event_id AND a.state = 'completed'
            AND a.action = 'redecide' AND a.outcome IN ('applied', 'duplicate', 'deferred')))
ORDER BY n.seq
LIMIT @max_rows;

-- name: AppendRedriveAudit :exec
-- AppendRedriveAudit appends one state of a redrive. The table refuses
-- updates and deletes; a state recorded twice is a unique violation.
INSERT INTO redrive_audit (redrive_id, service, event_id, action, state, outcome, actor, correlation_id, reason,
                           source_event_id)
VALUES (@redrive_id, @service, @event_id, @action, @state, sqlc.narg(outcome), @actor, @correlation_id, @reason,
        @source_event_id);

-- name: RedriveAudit :many
SELECT seq, redrive_id, service, event_id, action, state, outcome, actor, correlation_id, reason, at
FROM redrive_audit WHERE redrive_id = @redrive_id ORDER BY seq;

-- name: ReconciliationUsage :many
-- ReconciliationUsage reads a page of the projected usage facts of a
-- tenant's month, in event id order after a position.
SELECT event_id, COALESCE(subject_id, '00000000-0000-0000-0000-000000000000')::uuid AS usage_id,
       COALESCE(meter_code, '')::text AS meter_code, COALESCE(quantity, 0)::numeric AS quantity,
       COALESCE(period, '')::text AS period
FROM projected_event
WHERE tenant_id = @tenant_id AND event_type = 'UsageAccepted' AND period = @period::text AND event_id > @after
ORDER BY event_id
LIMIT @row_limit;

-- name: ReconciliationCharges :many
-- ReconciliationCharges reads a page of the projected charges of a tenant's
-- period, in (usage event id, event id) order after a position.
SELECT event_id, COALESCE(origin_event_id, '00000000-0000-0000-0000-000000000000')::uuid AS usage_event_id,
       COALESCE(currency, '')::text AS currency, COALESCE(quantity, 0)::numeric AS quantity,
       COALESCE(amount, 0)::numeric AS amount, COALESCE(period, '')::text AS period
FROM projected_event
WHERE tenant_id = @tenant_id AND event_type = 'ChargeRated' AND period = @period::text
  AND (origin_event_id, event_id) > (@after_key::uuid, @after_id::uuid)
ORDER BY origin_event_id, event_id
LIMIT @row_limit;

-- name: ReconciliationAdjustments :many
-- ReconciliationAdjustments reads a page of the projected adjustments of a
-- tenant's period, in event id order after a position.
SELECT event_id, COALESCE(currency, '')::text AS currency, COALESCE(amount, 0)::numeric AS amount,
       COALESCE(period, '')::text AS period
FROM projected_event
WHERE tenant_id = @tenant_id AND event_type = 'AdjustmentPosted' AND period = @period::text AND event_id > @after
ORDER BY event_id
LIMIT @row_limit;

-- name: ReconciliationInvoices :many
-- ReconciliationInvoices reads a page of the projected issued invoices of a
-- tenant's period, in invoice id order after a position.
SELECT COALESCE(subject_id, '00000000-0000-0000-0000-000000000000')::uuid AS invoice_id,
       COALESCE(period, '')::text AS period, COALESCE(currency, '')::text AS currency,
       COALESCE(amount, 0)::numeric AS total
FROM projected_event
WHERE tenant_id = @tenant_id AND event_type = 'InvoiceIssued' AND period = @period::text AND subject_id > @after::uuid
ORDER BY subject_id
LIMIT @row_limit;

-- name: ReconciliationCorrections :many
-- ReconciliationCorrections reads a page of the projected correction notes
-- of a tenant's period, in origin event id order after a position.
SELECT (payload->>'invoiceId')::uuid AS invoice_id, COALESCE(period, '')::text AS period,
       COALESCE(origin_event_id, '00000000-0000-0000-0000-000000000000')::uuid AS origin_event_id,
       COALESCE(amount, 0)::numeric AS amount
FROM projected_event
WHERE tenant_id = @tenant_id AND event_type = 'InvoiceCorrectionIssued' AND period = @period::text
  AND origin_event_id > @after::uuid
ORDER BY origin_event_id
LIMIT @row_limit;

-- name: AddChargeLineQuantities :many
-- AddChargeLineQuantities adds quantities to charge lines priced as a whole
-- (one entry per line; in key order, so concurrent batches lock lines in
-- one order) and returns each line's quantity after the addition.
INSERT INTO charge_line AS l (tenant_id, period, currency, meter_code, price_version, quantity)
SELECT u.tenant_id, u.period, u.currency, u.meter_code, u.price_version, u.quantity
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period,
             unnest(@currencies::text[]) AS currency, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@price_versions::bigint[]) AS price_version, unnest(@quantities::numeric[]) AS quantity) u
ORDER BY 1, 2, 3, 4, 5
ON CONFLICT (tenant_id, period, currency, meter_code, price_version)
DO UPDATE SET quantity = l.quantity + EXCLUDED.quantity
RETURNING l.tenant_id, l.period, l.currency, l.meter_code, l.price_version, l.quantity;
