-- name: Project :many
-- Project records events and their summary deltas, in one statement, in
-- the order given. An event projected before is a unique violation of
-- projected_event_pkey (a plain INSERT: a speculative one costs a third more,
-- and the inbox claimed the event first, so it is rare: the inbox decides it
-- a duplicate); one whose id is in a month archived
-- (projected_event_archived) is left out and gets no delta; the events stored add one
-- delta row per tenant, kind and key (their sum, count and latest
-- occurredAt), not one per event. The event ids stored are returned.
-- Nullable columns come as text, an empty string for NULL.
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
    FROM u
    WHERE NOT EXISTS (SELECT 1 FROM projected_event_archived a WHERE u.event_id >= a.lo AND u.event_id < a.hi)
    ORDER BY u.n
    RETURNING event_id
), delta AS (
    INSERT INTO summary_delta (tenant_id, kind, key, amount, occurred_at, events)
    SELECT u.tenant_id, u.delta_kind, u.delta_key, sum(u.delta_amount), max(u.occurred_at), count(*)
    FROM u JOIN ev ON ev.event_id = u.event_id
    GROUP BY u.tenant_id, u.delta_kind, u.delta_key
    ORDER BY min(u.n)
    RETURNING 1
)
SELECT ev.event_id FROM ev;

-- name: LockTenantSummary :exec
-- LockTenantSummary serialises the folds of one tenant (until commit).
SELECT pg_advisory_xact_lock(hashtextextended('query.tenant_summary:' || @tenant_id::text, 0));

-- name: FoldDeltas :one
-- FoldDeltas moves one chunk of a tenant's pending deltas into its totals
-- and summary: the next chunk_size deltas after seq after, up to seq
-- through, in seq order (one range scan of summary_delta_tenant_seq_idx,
-- bounded by the chunk whatever the tenant's backlog, then deleted by
-- primary key). It returns how many it moved and the last seq moved (the
-- next position; 0 when none). Call it after LockTenantSummary, in the
-- same transaction: the deltas leave and their sums arrive in one commit,
-- so a chunk is folded once or not at all.
WITH moved AS (
    DELETE FROM summary_delta d
    WHERE d.seq = ANY (ARRAY(
        SELECT p.seq FROM summary_delta p
        WHERE p.tenant_id = @tenant_id::text AND p.seq > @after::bigint AND p.seq <= @through::bigint
        ORDER BY p.seq
        LIMIT @chunk_size::int))
    RETURNING d.seq, d.kind, d.key, d.amount, d.occurred_at, d.events
), totals AS (
    INSERT INTO tenant_total (tenant_id, kind, key, amount, events)
    SELECT @tenant_id::text, m.kind, m.key, sum(m.amount), sum(m.events)
    FROM moved m WHERE m.kind <> 'seen'
    GROUP BY m.kind, m.key
    ON CONFLICT (tenant_id, kind, key) DO UPDATE
    SET amount = tenant_total.amount + EXCLUDED.amount, events = tenant_total.events + EXCLUDED.events
    RETURNING 1
), summary AS (
    INSERT INTO tenant_summary (tenant_id, events, last_event_at)
    SELECT @tenant_id::text, sum(m.events), max(m.occurred_at) FROM moved m
    HAVING count(*) > 0
    ON CONFLICT (tenant_id) DO UPDATE
    SET events = tenant_summary.events + EXCLUDED.events,
        last_event_at = GREATEST(tenant_summary.last_event_at, EXCLUDED.last_event_at)
    RETURNING 1
)
SELECT count(*)::bigint AS deltas, COALESCE(max(m.seq), 0)::bigint AS last_seq FROM moved m;

-- name: PendingDeltaChunk :many
-- PendingDeltaChunk reads one chunk of a tenant's deltas not folded yet,
-- for a read that adds them to the folded totals (in one snapshot): the
-- next chunk_size deltas after seq after, in seq order (one range scan of
-- summary_delta_tenant_seq_idx, bounded by the chunk whatever the tenant's
-- backlog), summed per kind and key ('seen' included: its key is empty),
-- each with its count and latest occurredAt. Each row also carries the
-- chunk's delta count and last seq (the next position); no row when the
-- chunk is empty.
WITH c AS (
    SELECT d.seq, d.kind, d.key, d.amount, d.occurred_at, d.events FROM summary_delta d
    WHERE d.tenant_id = @tenant_id::text AND d.seq > @after::bigint
    ORDER BY d.seq
    LIMIT @chunk_size::int
)
SELECT c.kind, c.key, sum(c.amount)::numeric AS amount, sum(c.events)::bigint AS events,
       max(c.occurred_at)::timestamptz AS last_event_at,
       (SELECT count(*) FROM c)::bigint AS chunk_deltas,
       (SELECT max(c.seq) FROM c)::bigint AS chunk_last
FROM c
GROUP BY c.kind, c.key ORDER BY c.kind, c.key;

-- name: LastDeltaSeq :one
-- LastDeltaSeq is the highest seq of the deltas not folded yet (0: none):
-- a round of the folder folds none after it, so a tenant written as fast
-- as it is folded does not hold the round (one row of the primary key).
SELECT COALESCE(max(seq), 0)::bigint AS seq FROM summary_delta;

-- name: ListTenantsToFold :many
-- ListTenantsToFold returns the tenants of the oldest pending deltas, for the
-- background folder.
SELECT DISTINCT o.tenant_id FROM (
    SELECT d.tenant_id FROM summary_delta d ORDER BY d.seq LIMIT @scan::int
) o;

-- name: CountPendingDeltas :one
-- CountPendingDeltas counts the deltas not folded yet up to 10,000 (the
-- gauge summary_deltas_pending; a larger backlog reads 10,000), so a
-- refresh reads a bounded number of rows whatever the backlog.
SELECT count(*) FROM (SELECT 1 FROM summary_delta LIMIT 10000) d;

-- name: GetTenantSummary :one
SELECT tenant_id, events, last_event_at FROM tenant_summary WHERE tenant_id = @tenant_id;

-- name: ListTenantTotals :many
-- ListTenantTotals reads a tenant's folded totals (one per meter with usage,
-- and per currency of each kind of amount): at most row_limit (NULL: all).
SELECT kind, key, amount, events FROM tenant_total WHERE tenant_id = @tenant_id ORDER BY kind, key
LIMIT sqlc.narg(row_limit)::int;

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

-- name: LockChargeLines :many
-- LockChargeLines makes sure each named charge line priced as a whole has
-- its row (an empty line: quantity 0, no latest) and locks them all until
-- the transaction ends, in key order, so concurrent batches lock lines in
-- one order; it returns each line's state before the batch.
INSERT INTO charge_line AS l (tenant_id, period, currency, meter_code, price_version, dimensions_key, quantity)
SELECT u.tenant_id, u.period, u.currency, u.meter_code, u.price_version, u.dimensions_key, 0
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period,
             unnest(@currencies::text[]) AS currency, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@price_versions::bigint[]) AS price_version,
             unnest(@dimensions_keys::text[]) AS dimensions_key) u
ORDER BY 1, 2, 3, 4, 5, 6
ON CONFLICT (tenant_id, period, currency, meter_code, price_version, dimensions_key)
DO UPDATE SET quantity = l.quantity
RETURNING l.tenant_id, l.period, l.currency, l.meter_code, l.price_version, l.dimensions_key, l.quantity,
          l.latest_at, COALESCE(l.latest_source_system, '')::text AS latest_source_system,
          COALESCE(l.latest_source_event_id, '')::text AS latest_source_event_id;

-- name: SetChargeLines :exec
-- SetChargeLines stores the lines' state after a batch (rows LockChargeLines
-- locked). An empty latest_source_system leaves latest as it was.
UPDATE charge_line AS l
SET quantity = u.quantity,
    latest_at = CASE WHEN u.latest_source_system = '' THEN l.latest_at ELSE u.latest_at END,
    latest_source_system = COALESCE(NULLIF(u.latest_source_system, ''), l.latest_source_system),
    latest_source_event_id = CASE WHEN u.latest_source_system = '' THEN l.latest_source_event_id ELSE u.latest_source_event_id END
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period,
             unnest(@currencies::text[]) AS currency, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@price_versions::bigint[]) AS price_version,
             unnest(@dimensions_keys::text[]) AS dimensions_key, unnest(@quantities::numeric[]) AS quantity,
             unnest(@latest_ats::timestamptz[]) AS latest_at,
             unnest(@latest_source_systems::text[]) AS latest_source_system,
             unnest(@latest_source_event_ids::text[]) AS latest_source_event_id) u
WHERE l.tenant_id = u.tenant_id AND l.period = u.period AND l.currency = u.currency AND l.meter_code = u.meter_code
  AND l.price_version = u.price_version AND l.dimensions_key = u.dimensions_key;

-- name: AddChargeLineValues :many
-- AddChargeLineValues adds the values of unique_count charges to their
-- lines' sets (under the lines' locks) and returns those not there before.
INSERT INTO charge_line_value (tenant_id, period, currency, meter_code, price_version, dimensions_key, value)
SELECT DISTINCT u.tenant_id, u.period, u.currency, u.meter_code, u.price_version, u.dimensions_key, u.value
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period,
             unnest(@currencies::text[]) AS currency, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@price_versions::bigint[]) AS price_version,
             unnest(@dimensions_keys::text[]) AS dimensions_key, unnest(@values::text[]) AS value) u
ON CONFLICT DO NOTHING
RETURNING tenant_id, period, currency, meter_code, price_version, dimensions_key, value::text AS value;

-- name: DefineMeter :exec
-- DefineMeter records a meter's definition; the first stays (a meter never
-- changes once defined).
INSERT INTO meter_definition (code, aggregation, value_property, dimensions, event_type, defined_at)
VALUES (@code, @aggregation, @value_property, @dimensions::text[], @event_type, @defined_at)
ON CONFLICT (code) DO NOTHING;

-- name: LockMetersShared :exec
-- LockMetersShared takes, until commit, the shared lock of each meter code
-- (in the order given: sorted) that a batch of facts reads the definition
-- of; LockMeter, its exclusive form, is taken by the MeterDefined that
-- rolls up the facts that came before it, so no fact is left between the two.
SELECT pg_advisory_xact_lock_shared(hashtextextended('query.meter:' || c, 0))
FROM unnest(@codes::text[]) WITH ORDINALITY AS x(c, n) ORDER BY n;

-- name: LockMeter :exec
SELECT pg_advisory_xact_lock(hashtextextended('query.meter:' || @code::text, 0));

-- name: GetMeterDefinitions :many
SELECT code, aggregation, value_property, dimensions::text[] AS dimensions, event_type, defined_at
FROM meter_definition WHERE code = ANY(@codes::text[]);

-- name: GetMeterDefinition :one
SELECT code, aggregation, value_property, dimensions::text[] AS dimensions, event_type, defined_at
FROM meter_definition WHERE code = @code;

-- name: ListMeterDefinitions :many
-- ListMeterDefinitions is a page of the catalog query holds, by code after
-- @after.
SELECT code, aggregation, value_property, dimensions::text[] AS dimensions, event_type, defined_at
FROM meter_definition WHERE code > @after::text ORDER BY code LIMIT @lim;

-- name: InsertUsageFacts :many
-- InsertUsageFacts records accepted facts; a fact recorded before (same
-- tenant, source system and source event id, in the partition its event id
-- routes it to: the event delivered again meets its own row) is left as it
-- is. It returns the identities inserted. dims (a JSON array of strings
-- each) is stored NULL for facts of a meter not known yet (known false).
INSERT INTO usage_fact (tenant_id, source_system, source_event_id, meter_code, occurred_at, event_id, quantity,
                        properties, dims, value)
SELECT u.tenant_id, u.source_system, u.source_event_id, u.meter_code, u.occurred_at, u.event_id, u.quantity,
       u.properties, CASE WHEN u.known THEN ARRAY(SELECT e FROM jsonb_array_elements_text(u.dims) WITH ORDINALITY AS x(e, i) ORDER BY i) END, NULLIF(u.value, '')
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@source_systems::text[]) AS source_system,
             unnest(@source_event_ids::text[]) AS source_event_id, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@occurred_ats::timestamptz[]) AS occurred_at, unnest(@event_ids::uuid[]) AS event_id,
             unnest(@quantities::numeric[]) AS quantity, unnest(@properties::jsonb[]) AS properties,
             unnest(@dims::jsonb[]) AS dims, unnest(@known::bool[]) AS known, unnest(@values::text[]) AS value) u
ON CONFLICT DO NOTHING
RETURNING tenant_id, source_system::text AS source_system, source_event_id::text AS source_event_id;

-- name: ArchivedFactSpan :one
-- ArchivedFactSpan is, among the spans of occurredAt of the tenant's facts
-- of a meter archived with their months (projected_event_archive), the one
-- that ends last of those meeting [from_at, to_at); no row when every fact
-- of that range is still in usage_fact.
SELECT partition, occurred_from, occurred_to FROM usage_fact_archived
WHERE tenant_id = @tenant_id AND meter_code = @meter_code
  AND occurred_from < @to_at::timestamptz AND occurred_to >= @from_at::timestamptz
ORDER BY occurred_to DESC
LIMIT 1;

-- name: ListUnrolledFacts :many
-- ListUnrolledFacts reads (and locks) a chunk of the facts of a meter that
-- arrived before its definition.
SELECT tenant_id, source_system::text AS source_system, source_event_id::text AS source_event_id,
       occurred_at, quantity, properties
FROM usage_fact WHERE meter_code = @meter_code AND dims IS NULL
ORDER BY tenant_id, source_system, source_event_id
LIMIT @row_limit FOR UPDATE;

-- name: SetFactDimensions :exec
UPDATE usage_fact AS f SET dims = ARRAY(SELECT e FROM jsonb_array_elements_text(u.dims) WITH ORDINALITY AS x(e, i) ORDER BY i), value = NULLIF(u.value, '')
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@source_systems::text[]) AS source_system,
             unnest(@source_event_ids::text[]) AS source_event_id, unnest(@dims::jsonb[]) AS dims,
             unnest(@values::text[]) AS value) u
WHERE f.tenant_id = u.tenant_id AND f.source_system = u.source_system AND f.source_event_id = u.source_event_id;

-- name: AddUsageHourly :exec
-- AddUsageHourly adds what a batch's facts add to their hourly rollups (one
-- entry per rollup, in key order, so concurrent batches lock rows in one
-- order): count and sum add, max and latest keep the larger (latest by
-- occurredAt, then sourceSystem, then sourceEventId, byte order).
INSERT INTO usage_hourly AS h (tenant_id, meter_code, hour, dims, facts, sum, max, latest_at, latest_source_system,
                               latest_source_event_id, latest_quantity)
SELECT u.tenant_id, u.meter_code, u.hour, ARRAY(SELECT e FROM jsonb_array_elements_text(u.dims) WITH ORDINALITY AS x(e, i) ORDER BY i), u.facts, u.sum, u.max, u.latest_at, u.latest_source_system,
       u.latest_source_event_id, u.latest_quantity
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@hours::timestamptz[]) AS hour, unnest(@dims::jsonb[]) AS dims,
             unnest(@facts::bigint[]) AS facts, unnest(@sums::numeric[]) AS sum, unnest(@maxes::numeric[]) AS max,
             unnest(@latest_ats::timestamptz[]) AS latest_at,
             unnest(@latest_source_systems::text[]) AS latest_source_system,
             unnest(@latest_source_event_ids::text[]) AS latest_source_event_id,
             unnest(@latest_quantities::numeric[]) AS latest_quantity,
             generate_series(1, cardinality(@tenant_ids::text[])) AS n) u
ORDER BY u.n
ON CONFLICT (tenant_id, meter_code, hour, dims) DO UPDATE
SET facts = h.facts + EXCLUDED.facts,
    sum = h.sum + EXCLUDED.sum,
    max = GREATEST(h.max, EXCLUDED.max),
    latest_at = CASE WHEN (EXCLUDED.latest_at, EXCLUDED.latest_source_system, EXCLUDED.latest_source_event_id)
                        > (h.latest_at, h.latest_source_system, h.latest_source_event_id)
                     THEN EXCLUDED.latest_at ELSE h.latest_at END,
    latest_source_system = CASE WHEN (EXCLUDED.latest_at, EXCLUDED.latest_source_system, EXCLUDED.latest_source_event_id)
                        > (h.latest_at, h.latest_source_system, h.latest_source_event_id)
                     THEN EXCLUDED.latest_source_system ELSE h.latest_source_system END,
    latest_source_event_id = CASE WHEN (EXCLUDED.latest_at, EXCLUDED.latest_source_system, EXCLUDED.latest_source_event_id)
                        > (h.latest_at, h.latest_source_system, h.latest_source_event_id)
                     THEN EXCLUDED.latest_source_event_id ELSE h.latest_source_event_id END,
    latest_quantity = CASE WHEN (EXCLUDED.latest_at, EXCLUDED.latest_source_system, EXCLUDED.latest_source_event_id)
                        > (h.latest_at, h.latest_source_system, h.latest_source_event_id)
                     THEN EXCLUDED.latest_quantity ELSE h.latest_quantity END;

-- name: AddUsageDistinctDays :exec
-- AddUsageDistinctDays adds the hours of a batch's unique_count facts to
-- their (day, value) rows (one entry per row, in key order); a row whose
-- hours do not change is not written.
INSERT INTO usage_distinct_day AS d (tenant_id, meter_code, day, value, hours)
SELECT u.tenant_id, u.meter_code, u.day, u.value, u.hours
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@days::date[]) AS day, unnest(@values::text[]) AS value, unnest(@hours::int[]) AS hours,
             generate_series(1, cardinality(@tenant_ids::text[])) AS n) u
ORDER BY u.n
ON CONFLICT (tenant_id, meter_code, day, value) DO UPDATE SET hours = d.hours | EXCLUDED.hours
WHERE (d.hours | EXCLUDED.hours) <> d.hours;

-- name: SetTenantZone :exec
-- SetTenantZone keeps the zone of the tenant's latest period seen ending.
INSERT INTO tenant_zone AS z (tenant_id, period, time_zone) VALUES (@tenant_id, @period, @time_zone)
ON CONFLICT (tenant_id) DO UPDATE SET period = EXCLUDED.period, time_zone = EXCLUDED.time_zone
WHERE EXCLUDED.period > z.period;

-- name: GetTenantZone :one
SELECT time_zone FROM tenant_zone WHERE tenant_id = @tenant_id;

-- name: ReconciliationChargeObservations :many
-- ReconciliationChargeObservations reads a page of what the projected
-- charges of a tenant's period contribute to their lines' aggregation (the
-- ChargeRated payloads' aggregation, occurredAt, identity and value), in
-- (usage event id, event id) order after a position, as ReconciliationCharges.
SELECT event_id, COALESCE(origin_event_id, '00000000-0000-0000-0000-000000000000')::uuid AS usage_event_id,
       COALESCE(quantity, 0)::numeric AS quantity,
       COALESCE(payload->>'aggregation', '')::text AS aggregation,
       COALESCE((payload->>'occurredAt')::timestamptz, 'epoch'::timestamptz)::timestamptz AS occurred_at,
       COALESCE(payload->>'sourceSystem', '')::text AS source_system,
       COALESCE(payload->>'sourceEventId', '')::text AS source_event_id,
       COALESCE(payload->>'value', '')::text AS value
FROM projected_event
WHERE tenant_id = @tenant_id AND event_type = 'ChargeRated' AND period = @period::text
  AND (origin_event_id, event_id) > (@after_key::uuid, @after_id::uuid)
ORDER BY origin_event_id, event_id
LIMIT @row_limit;

-- name: ChargeFacts :many
-- ChargeFacts reads a page of the charges of a tenant's period, each with
-- the usage fact it rates (the projected UsageAccepted, absent until it is
-- projected), in (usage event id, event id) order after a position: the
-- trace of an invoice line. A line names its meter, and, when by_line, its
-- price version, plan, dimensions and whether it is the unpriced line.
SELECT c.event_id, COALESCE(c.subject_id, '00000000-0000-0000-0000-000000000000')::uuid AS charge_id,
       COALESCE(c.origin_event_id, '00000000-0000-0000-0000-000000000000')::uuid AS usage_event_id,
       c.payload AS charge, u.payload AS fact
FROM projected_event c
LEFT JOIN projected_event u ON u.event_id = c.origin_event_id AND u.event_type = 'UsageAccepted'
    AND u.tenant_id = c.tenant_id
WHERE c.tenant_id = @tenant_id AND c.event_type = 'ChargeRated' AND c.period = @period::text
  AND (@meter_code::text = '' OR c.meter_code = @meter_code::text)
  AND (@currency::text = '' OR c.currency = @currency::text)
  AND (NOT @by_line::boolean OR (
        COALESCE(c.payload->>'unpriced', 'false') = CASE WHEN @unpriced::boolean THEN 'true' ELSE 'false' END
    AND COALESCE((c.payload->>'priceVersion')::bigint, 0) = @price_version::bigint
    AND COALESCE(c.payload->>'planCode', '') = @plan_code::text
    AND COALESCE(c.payload->'dimensions', '{}'::jsonb) = @dimensions::jsonb))
  AND (c.origin_event_id, c.event_id) > (@after_key::uuid, @after_id::uuid)
ORDER BY c.origin_event_id, c.event_id
LIMIT @row_limit;

-- name: LateCharges :many
-- LateCharges reads a page of the late charges of a tenant's billed period
-- (projected_late_charge_idx), each with the usage fact it rates and the
-- closed period its fact occurred in: the earliest of the tenant's closed
-- periods before it whose end (BillingPeriodClosed.periodEnd, in the
-- tenant's zone) is after the fact's occurredAt ('' when no close says).
SELECT c.event_id, COALESCE(c.subject_id, '00000000-0000-0000-0000-000000000000')::uuid AS charge_id,
       COALESCE(c.origin_event_id, '00000000-0000-0000-0000-000000000000')::uuid AS usage_event_id,
       c.payload AS charge, u.payload AS fact, COALESCE(occ.period, '')::text AS occurrence_period
FROM projected_event c
LEFT JOIN projected_event u ON u.event_id = c.origin_event_id AND u.event_type = 'UsageAccepted'
    AND u.tenant_id = c.tenant_id
LEFT JOIN LATERAL (
    SELECT p.period FROM projected_event p
    WHERE p.tenant_id = c.tenant_id AND p.event_type = 'BillingPeriodClosed' AND p.period < c.period
      AND p.payload ? 'periodEnd'
      AND (p.payload->>'periodEnd')::timestamptz > (c.payload->>'occurredAt')::timestamptz
    ORDER BY p.period
    LIMIT 1) occ ON true
WHERE c.tenant_id = @tenant_id AND c.event_type = 'ChargeRated' AND c.period = @period::text
  AND (c.payload->>'late') = 'true'
  AND (c.origin_event_id, c.event_id) > (@after_key::uuid, @after_id::uuid)
ORDER BY c.origin_event_id, c.event_id
LIMIT @row_limit;
