-- name: AddCharges :many
-- AddCharges records ChargeRated events, in the order given, each as a
-- charge of the open invoice of its tenant, period and currency, creating
-- the invoices missing, in one insert-only statement that writes no row
-- another charge of a sum or count line writes (an invoice insert does
-- nothing when the invoice exists). A max or latest charge also raises its
-- line's running figure (invoice_line_figure) when it beats it, and a
-- unique_count charge adds its value to its line's set
-- (invoice_line_value): both by comparison or set union, so neither depends
-- on the order of the charges, and a redelivery changes neither; how many
-- values the batch added to each line's set and to its meter's set across
-- lines is written beside (invoice_line_value_part, invoice_meter_value,
-- invoice_meter_value_part), insert-only. Rows are
-- written in key order, so two batches lock shared rows in one order. It
-- returns per event, in order: whether its period is closed, whether the
-- charge was added, and, when it was not, whether a charge of that origin
-- was already recorded, here or in a month archived (a redelivery: a
-- duplicate). Nothing is written for a closed period. A charge of an open
-- period recorded before is a unique violation of invoice_charge_origin_key
-- (a plain INSERT: a speculative one costs a third more, and the inbox
-- claimed the event first, so it is rare: the inbox decides it a duplicate).
WITH u AS (
    SELECT unnest(@origin_event_ids::uuid[])  AS origin_event_id,
           unnest(@charge_ids::uuid[])        AS charge_id,
           unnest(@usage_event_ids::uuid[])   AS usage_event_id,
           unnest(@tenant_ids::text[])        AS tenant_id,
           unnest(@periods::text[])           AS period,
           unnest(@currencies::text[])        AS currency,
           unnest(@meter_codes::text[])       AS meter_code,
           unnest(@price_versions::bigint[])  AS price_version,
           unnest(@unit_prices::numeric[])    AS unit_price,
           unnest(@quantities::numeric[])     AS quantity,
           unnest(@amounts::numeric[])        AS amount,
           unnest(@new_invoice_ids::uuid[])   AS new_invoice_id,
           unnest(@aggregations::text[])      AS aggregation,
           unnest(@dimensions_keys::text[]) COLLATE "C" AS dimensions_key,
           unnest(@unpriceds::boolean[])      AS unpriced,
           unnest(@occurred_ats::timestamptz[]) AS occurred_at,
           unnest(@source_systems::text[]) COLLATE "C" AS source_system,
           unnest(@source_event_ids::text[]) COLLATE "C" AS source_event_id,
           unnest(@uniq_values::text[]) COLLATE "C" AS value,
           generate_series(1, cardinality(@origin_event_ids::uuid[])) AS n
), c AS (
    SELECT u.*, EXISTS (
        SELECT 1 FROM period_close pc
        WHERE pc.tenant_id = u.tenant_id AND pc.period = u.period) AS closed
    FROM u
), created AS (
    INSERT INTO invoice (invoice_id, tenant_id, period, currency)
    SELECT DISTINCT ON (c.tenant_id, c.period, c.currency) c.new_invoice_id, c.tenant_id, c.period, c.currency
    FROM c WHERE NOT c.closed
    ORDER BY c.tenant_id, c.period, c.currency, c.n
    ON CONFLICT (tenant_id, period, currency) DO NOTHING
    RETURNING invoice_id
), charge AS (
    INSERT INTO invoice_charge (origin_event_id, charge_id, usage_event_id, tenant_id, period, currency, meter_code,
                                price_version, unit_price, quantity, amount, aggregation, dimensions_key, unpriced)
    SELECT c.origin_event_id, c.charge_id, c.usage_event_id, c.tenant_id, c.period, c.currency,
           c.meter_code, c.price_version, c.unit_price, c.quantity, c.amount, c.aggregation, c.dimensions_key, c.unpriced
    FROM c WHERE NOT c.closed
    ORDER BY c.n
    RETURNING origin_event_id
), batch_figure AS (
    -- One row per line of the batch: its largest quantity (max), or its
    -- latest charge (latest).
    SELECT DISTINCT ON (c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced)
           c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced, c.aggregation,
           CASE WHEN c.aggregation = 'max'
                THEN max(c.quantity) OVER (PARTITION BY c.tenant_id, c.period, c.currency, c.meter_code, c.price_version,
                                                        c.dimensions_key, c.unpriced)
                ELSE c.quantity END AS quantity,
           c.occurred_at, c.source_system, c.source_event_id
    FROM c WHERE NOT c.closed AND c.aggregation IN ('max', 'latest')
    ORDER BY c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced,
             c.occurred_at DESC, c.source_system DESC, c.source_event_id DESC
), figure AS (
    INSERT INTO invoice_line_figure AS f (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced,
                                          aggregation, quantity, latest_at, latest_source_system, latest_source_event_id)
    SELECT b.tenant_id, b.period, b.currency, b.meter_code, b.price_version, b.dimensions_key, b.unpriced,
           b.aggregation, b.quantity,
           CASE WHEN b.aggregation = 'latest' THEN b.occurred_at END,
           CASE WHEN b.aggregation = 'latest' THEN b.source_system END,
           CASE WHEN b.aggregation = 'latest' THEN b.source_event_id END
    FROM batch_figure b
    ORDER BY b.tenant_id, b.period, b.currency, b.meter_code, b.price_version, b.dimensions_key, b.unpriced
    ON CONFLICT (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced) DO UPDATE
    SET quantity = excluded.quantity, latest_at = excluded.latest_at,
        latest_source_system = excluded.latest_source_system, latest_source_event_id = excluded.latest_source_event_id
    WHERE (f.aggregation = 'max' AND excluded.quantity > f.quantity)
       OR (f.aggregation = 'latest' AND (excluded.latest_at, excluded.latest_source_system, excluded.latest_source_event_id)
                                        > (f.latest_at, f.latest_source_system, f.latest_source_event_id))
    RETURNING 1
), uniq AS (
    INSERT INTO invoice_line_value (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced, value)
    SELECT DISTINCT c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced, c.value
    FROM c WHERE NOT c.closed AND c.aggregation = 'unique_count'
    ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced
), uniq_part AS (
    -- How many values the batch added to each line's set (those new to
    -- it): a spend alert's distinct values sum these.
    INSERT INTO invoice_line_value_part (tenant_id, period, currency, meter_code, price_version, dimensions_key,
                                         unpriced, new_values)
    SELECT q.tenant_id, q.period, q.currency, q.meter_code, q.price_version, q.dimensions_key, q.unpriced, count(*)
    FROM uniq q
    GROUP BY q.tenant_id, q.period, q.currency, q.meter_code, q.price_version, q.dimensions_key, q.unpriced
    RETURNING 1
), meter_uniq AS (
    -- The meter's set across its lines, and how many values the batch
    -- added to it: a usage alert's distinct values sum these.
    INSERT INTO invoice_meter_value (tenant_id, period, meter_code, value)
    SELECT DISTINCT c.tenant_id, c.period, c.meter_code, c.value
    FROM c WHERE NOT c.closed AND c.aggregation = 'unique_count'
    ORDER BY 1, 2, 3, 4
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, period, meter_code
), meter_uniq_part AS (
    INSERT INTO invoice_meter_value_part (tenant_id, period, meter_code, new_values)
    SELECT m.tenant_id, m.period, m.meter_code, count(*)
    FROM meter_uniq m
    GROUP BY m.tenant_id, m.period, m.meter_code
    RETURNING 1
), part AS (
    -- What the batch added to each line (the charges added, not those
    -- recorded before): the alerts' running figures sum these.
    INSERT INTO invoice_line_part (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced,
                                   aggregation, unit_price, quantity, charges, amount)
    SELECT c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced,
           c.aggregation, c.unit_price, sum(c.quantity), count(*), sum(c.amount)
    FROM c JOIN charge a ON a.origin_event_id = c.origin_event_id
    GROUP BY c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced,
             c.aggregation, c.unit_price
    RETURNING 1
)
SELECT c.closed::boolean AS closed,
       (a.origin_event_id IS NOT NULL)::boolean AS added,
       (a.origin_event_id IS NULL AND (EXISTS (
            SELECT 1 FROM invoice_charge k WHERE k.origin_event_id = c.origin_event_id) OR EXISTS (
            SELECT 1 FROM invoice_charge_archived r WHERE c.origin_event_id >= r.lo AND c.origin_event_id < r.hi)))::boolean AS known
FROM c LEFT JOIN charge a ON a.origin_event_id = c.origin_event_id
ORDER BY c.n;

-- name: AddAdjustmentLine :one
-- AddAdjustmentLine puts an adjustment line on the open invoice of its
-- tenant, period and currency, creating the invoice when it has none, unless
-- the period is closed. One round trip. It reports whether the period is
-- closed, the invoice it found or created (the zero uuid when none), its
-- status and whether the line was added. A concurrent creation of the same
-- invoice leaves no invoice and no line (the caller retries). An adjustment
-- already a line is inserted again whatever the invoice's status, so that its
-- origin key (invoice_line_origin_key) makes a redelivery a duplicate.
WITH closed AS (
    SELECT EXISTS (
        SELECT 1 FROM period_close pc
        WHERE pc.tenant_id = @tenant_id::text AND pc.period = @period::text) AS closed
), known AS (
    SELECT EXISTS (
        SELECT 1 FROM invoice_line l
        WHERE l.origin_event_id = @origin_event_id::uuid AND l.kind = 'adjustment') AS known
), existing AS (
    SELECT i.invoice_id, i.status FROM invoice i
    WHERE i.tenant_id = @tenant_id::text AND i.period = @period::text AND i.currency = @currency::text
), created AS (
    INSERT INTO invoice (invoice_id, tenant_id, period, currency)
    SELECT @new_invoice_id::uuid, @tenant_id::text, @period::text, @currency::text
    WHERE NOT EXISTS (SELECT 1 FROM existing) AND NOT (SELECT c.closed FROM closed c)
    ON CONFLICT (tenant_id, period, currency) DO NOTHING
    RETURNING invoice_id, status
), target AS (
    SELECT e.invoice_id, e.status FROM existing e
    UNION ALL
    SELECT n.invoice_id, n.status FROM created n
), line AS (
    INSERT INTO invoice_line (invoice_id, origin_event_id, kind, amount)
    SELECT t.invoice_id, @origin_event_id::uuid, 'adjustment', @amount::numeric FROM target t
    WHERE (t.status = 'open' AND NOT (SELECT c.closed FROM closed c)) OR (SELECT k.known FROM known k)
    RETURNING invoice_id
)
SELECT (SELECT c.closed FROM closed c)::boolean AS closed,
       COALESCE((SELECT t.invoice_id FROM target t), '00000000-0000-0000-0000-000000000000')::uuid AS invoice_id,
       COALESCE((SELECT t.status FROM target t), '')::text AS status,
       EXISTS (SELECT 1 FROM line) AS added;

-- name: FindInvoiceToCorrect :one
-- FindInvoiceToCorrect tells an adjustment posted after its period's close
-- whether invoice has applied that close, and the invoice of its currency
-- (the zero uuid when none) with its status.
SELECT EXISTS (
           SELECT 1 FROM period_close pc
           WHERE pc.tenant_id = @tenant_id::text AND pc.period = @period::text)::boolean AS closed,
       COALESCE((SELECT i.invoice_id FROM invoice i
                 WHERE i.tenant_id = @tenant_id::text AND i.period = @period::text
                   AND i.currency = @currency::text), '00000000-0000-0000-0000-000000000000')::uuid AS invoice_id,
       COALESCE((SELECT i.status FROM invoice i
                 WHERE i.tenant_id = @tenant_id::text AND i.period = @period::text
                   AND i.currency = @currency::text), '')::text AS status;

-- name: CloseApplied :one
-- Whether the close of a tenant's period has been applied (its invoices
-- issued).
SELECT EXISTS (SELECT 1 FROM period_close WHERE tenant_id = @tenant_id AND period = @period)::boolean AS applied;

-- name: RecordClose :exec
-- RecordClose records a period's close; a second close of the same period is
-- a unique violation (the close's effect already exists).
INSERT INTO period_close (tenant_id, period, close_event_id, closed_at, charges, adjustments)
VALUES (@tenant_id, @period, @close_event_id, @closed_at, @charges, @adjustments);

-- name: LockPeriodInvoices :many
-- LockPeriodInvoices locks the invoices of a tenant's period, in currency
-- order, before the close tallies them: an adjustment line being added
-- holds its invoice (foreign key), so the tally that follows sees it.
SELECT invoice_id, currency, status
FROM invoice
WHERE tenant_id = @tenant_id AND period = @period
ORDER BY currency
FOR UPDATE;

-- name: TallyAdjustments :many
-- TallyAdjustments counts and sums the adjustment lines of a tenant's period
-- by currency, with the digest of their origin event ids.
SELECT i.currency,
       count(*)::bigint AS adjustments,
       sum(l.amount)::numeric AS amount,
       sum(('x' || encode(substr(sha256(convert_to(l.origin_event_id::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint)::text AS digest
FROM invoice_line l JOIN invoice i ON i.invoice_id = l.invoice_id
WHERE i.tenant_id = @tenant_id AND i.period = @period AND l.kind = 'adjustment'
GROUP BY i.currency
ORDER BY i.currency;

-- name: EnsureInvoice :exec
-- Opens the invoice of a tenant's period and currency unless it exists: a
-- currency whose period has fees but no charge gets its invoice at the close.
INSERT INTO invoice (invoice_id, tenant_id, period, currency)
VALUES (@invoice_id, @tenant_id, @period, @currency)
ON CONFLICT (tenant_id, period, currency) DO NOTHING;

-- name: InsertFeeLines :exec
-- Writes an invoice's fixed-fee and true-up lines, from the close that
-- issues it.
INSERT INTO invoice_line (invoice_id, origin_event_id, kind, plan_code, plan_version, fee_code, fee_name, days, period_days, amount)
SELECT @invoice_id::uuid, @origin_event_id::uuid, u.kind, u.plan_code, u.plan_version, NULLIF(u.fee_code, ''),
       NULLIF(u.fee_name, ''), u.days, u.period_days, u.amount
FROM (SELECT unnest(@kinds::text[]) AS kind, unnest(@plan_codes::text[]) AS plan_code,
             unnest(@plan_versions::bigint[]) AS plan_version, unnest(@fee_codes::text[]) AS fee_code,
             unnest(@fee_names::text[]) AS fee_name, unnest(@days::int[]) AS days,
             unnest(@period_days::int[]) AS period_days, unnest(@amounts::numeric[]) AS amount) u;

-- name: AddRoundingLine :exec
INSERT INTO invoice_line (invoice_id, origin_event_id, kind, amount)
VALUES (@invoice_id, @origin_event_id::uuid, 'rounding', @amount);

-- name: InsertTaxLines :exec
-- Writes an invoice's tax lines, in the order of the period's tax rates,
-- from the close that issues it.
INSERT INTO invoice_line (invoice_id, origin_event_id, kind, tax_code, tax_name, tax_rate, amount)
SELECT @invoice_id::uuid, @origin_event_id::uuid, 'tax', u.tax_code, u.tax_name, u.tax_rate, u.amount
FROM (SELECT unnest(@tax_codes::text[]) AS tax_code, unnest(@tax_names::text[]) AS tax_name,
             unnest(@tax_rates::numeric[]) AS tax_rate, unnest(@amounts::numeric[]) AS amount) u;

-- name: NextInvoiceNumber :one
-- NextInvoiceNumber takes the tenant's next invoice number. The counter row
-- stays locked until the issuing transaction ends, so numbers are gap-free.
INSERT INTO invoice_number_counter (tenant_id, last_number)
VALUES (@tenant_id, 1)
ON CONFLICT (tenant_id) DO UPDATE SET last_number = invoice_number_counter.last_number + 1
RETURNING last_number;

-- name: IssueInvoice :execrows
UPDATE invoice
SET status = 'issued', number = @number::bigint, subtotal = @subtotal::numeric, tax_total = @tax_total::numeric, total = @total::numeric,
    credits_applied = @credits_applied::numeric, amount_due = @amount_due::numeric,
    issued_at = @issued_at::timestamptz, close_event_id = @close_event_id::uuid, issued_event_id = @issued_event_id::uuid
WHERE invoice_id = @invoice_id AND status = 'open';

-- name: LockIssuedInvoice :one
-- LockIssuedInvoice locks an issued invoice: its correction notes are
-- decided one at a time. Read its state with IssuedInvoiceState in a later
-- statement, whose snapshot sees every note committed before the lock was
-- granted (this statement's does not).
SELECT i.invoice_id
FROM invoice i
WHERE i.invoice_id = @invoice_id AND i.status = 'issued'
FOR UPDATE OF i;

-- name: IssuedInvoiceState :one
-- IssuedInvoiceState is what a correction note of an issued invoice the
-- caller holds locked is decided on: the invoice's total, the sum of its
-- correction notes but the one of @origin_event_id (a redelivered
-- adjustment is decided as the first time, and is then a duplicate), and
-- the aggregate version the next note takes (InvoiceIssued is version 1).
-- It reads the invoice's running totals (invoice_correction_total) and at
-- most the one note of @origin_event_id: its cost does not grow with the
-- notes the invoice has.
SELECT i.total::numeric AS total,
       (COALESCE(t.corrected, 0) - COALESCE((SELECT c.amount FROM invoice_correction c
            WHERE c.origin_event_id = @origin_event_id::uuid AND c.invoice_id = i.invoice_id), 0))::numeric AS corrected,
       (COALESCE(t.last_version, 1) + 1)::bigint AS next_version
FROM invoice i
LEFT JOIN invoice_correction_total t ON t.invoice_id = i.invoice_id
WHERE i.invoice_id = @invoice_id::uuid AND i.status = 'issued';

-- name: AddCorrection :execrows
-- AddCorrection records a correction note, unless the adjustment is already a
-- line of the invoice (it then has its effect).
INSERT INTO invoice_correction (correction_id, invoice_id, origin_event_id, amount, issued_at, version, event_id)
SELECT @correction_id, @invoice_id, @origin_event_id, @amount, @issued_at, @version, @event_id
WHERE NOT EXISTS (
    SELECT 1 FROM invoice_line l WHERE l.origin_event_id = @origin_event_id AND l.kind = 'adjustment');

-- name: AddCorrectionTotal :exec
-- AddCorrectionTotal counts a note just added into its invoice's running
-- totals (the caller holds the invoice locked).
INSERT INTO invoice_correction_total (invoice_id, corrected, last_version)
VALUES (@invoice_id, @amount, @version)
ON CONFLICT (invoice_id) DO UPDATE
SET corrected = invoice_correction_total.corrected + EXCLUDED.corrected, last_version = EXCLUDED.last_version;

-- name: GetInvoice :one
SELECT i.invoice_id, i.tenant_id, i.period, i.currency, i.status, i.number, i.subtotal, i.tax_total, i.total, i.credits_applied, i.amount_due, i.issued_at,
       (i.status = 'open' AND g.period IS NOT NULL)::boolean AS draft
FROM invoice i
LEFT JOIN period_grace g ON g.tenant_id = i.tenant_id AND g.period = i.period
WHERE i.tenant_id = @tenant_id AND i.invoice_id = @invoice_id;

-- name: ListInvoices :many
-- ListInvoices reads a page of a tenant's invoices, of one period or of
-- every period (period null), in (period, currency) order after the keyset
-- position (after_period, after_currency), or from the start when that is
-- null.
SELECT i.invoice_id, i.tenant_id, i.period, i.currency, i.status, i.number, i.subtotal, i.tax_total, i.total, i.credits_applied, i.amount_due, i.issued_at,
       (i.status = 'open' AND g.period IS NOT NULL)::boolean AS draft
FROM invoice i
LEFT JOIN period_grace g ON g.tenant_id = i.tenant_id AND g.period = i.period
WHERE i.tenant_id = @tenant_id
  AND (sqlc.narg(period)::text IS NULL OR i.period = sqlc.narg(period)::text)
  AND (sqlc.narg(after_period)::text IS NULL
       OR (i.period, i.currency) > (sqlc.narg(after_period)::text, @after_currency::text))
ORDER BY i.period, i.currency
LIMIT @page_size;

-- name: ListPeriodsInvoices :many
-- ListPeriodsInvoices reads a tenant's invoices of the given periods.
SELECT i.invoice_id, i.tenant_id, i.period, i.currency, i.status, i.number, i.subtotal, i.tax_total, i.total, i.credits_applied, i.amount_due, i.issued_at,
       (i.status = 'open' AND g.period IS NOT NULL)::boolean AS draft
FROM invoice i
LEFT JOIN period_grace g ON g.tenant_id = i.tenant_id AND g.period = i.period
WHERE i.tenant_id = @tenant_id AND i.period = ANY(@periods::text[])
ORDER BY i.period, i.currency;

-- name: ListCorrections :many
-- ListCorrections reads the correction notes of the invoices, at most
-- row_limit (NULL: all).
SELECT correction_id, invoice_id, origin_event_id, amount, issued_at
FROM invoice_correction
WHERE invoice_id = ANY(@invoice_ids::uuid[])
ORDER BY invoice_id, version
LIMIT sqlc.narg(row_limit)::int;

-- name: ReconciliationCorrections :many
-- ReconciliationCorrections reads a page of the correction notes of a
-- tenant's invoices of a period, in origin event id order after a position.
SELECT c.invoice_id, i.period, c.origin_event_id, c.amount
FROM invoice_correction c JOIN invoice i ON i.invoice_id = c.invoice_id
WHERE i.tenant_id = @tenant_id AND i.period = @period AND c.origin_event_id > @after
ORDER BY c.origin_event_id
LIMIT @row_limit;

-- name: RecordVersionPricings :exec
-- Records the pricing of price versions under another model than unit, as
-- charges bring them; a version already recorded is left as it is. A
-- plan's charge is recorded under its line key, the tenant's own version
-- under '' (migration 0011).
INSERT INTO invoice_price_version (tenant_id, currency, meter_code, price_version, price_key, pricing)
SELECT u.tenant_id, u.currency, u.meter_code, u.price_version, u.price_key, u.pricing
FROM (SELECT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@currencies::text[]) AS currency,
             unnest(@meter_codes::text[]) AS meter_code, unnest(@price_versions::bigint[]) AS price_version,
             unnest(@price_keys::text[]) AS price_key, unnest(@pricings::text[])::jsonb AS pricing) u
ORDER BY 1, 2, 3, 4, 5
ON CONFLICT DO NOTHING;

-- name: RecordPeriodEnded :exec
-- Records that billing's period ended and is in grace (BillingPeriodEnded):
-- its open invoices read as draft until the close issues them (decision
-- 0014). A redelivery changes nothing.
INSERT INTO period_grace (tenant_id, period, ended_at, closes_at, event_id)
VALUES (@tenant_id, @period, @ended_at, @closes_at, @event_id)
ON CONFLICT DO NOTHING;

-- name: TallyChargeChunk :many
-- One chunk of a close's tally: the next chunk_size charges of a tenant's
-- period after the position (usage_event_id, origin_event_id), one range
-- scan of invoice_charge_reconciliation_idx bounded by the chunk whatever
-- the period's size, grouped by currency and line (meter, price version,
-- price dimensions, unpriced) with the line's aggregation and unit price:
-- count, exact sums and the digest of their origin event ids (pkg/digest,
-- SQLTerm). Every row carries the chunk's last position; no row: no charge
-- after the position.
WITH c AS (
    SELECT ch.usage_event_id, ch.origin_event_id, ch.currency, ch.meter_code, ch.price_version, ch.dimensions_key,
           ch.unpriced, ch.aggregation, ch.unit_price, ch.quantity, ch.amount
    FROM invoice_charge ch
    WHERE ch.tenant_id = @tenant_id AND ch.period = @period
      AND (ch.usage_event_id, ch.origin_event_id) > (sqlc.arg(after_usage)::uuid, sqlc.arg(after_origin)::uuid)
    ORDER BY ch.usage_event_id, ch.origin_event_id
    LIMIT sqlc.arg(chunk_size)::int
), last AS (
    SELECT c.usage_event_id, c.origin_event_id FROM c ORDER BY c.usage_event_id DESC, c.origin_event_id DESC LIMIT 1
)
SELECT g.currency, g.meter_code, g.price_version, g.dimensions_key::text AS dimensions_key, g.unpriced, g.aggregation,
       g.unit_price, g.charges::bigint AS charges, g.quantity::numeric AS quantity, g.amount::numeric AS amount,
       g.digest::text AS digest, last.usage_event_id::uuid AS last_usage, last.origin_event_id::uuid AS last_origin
FROM (SELECT c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced, c.aggregation, c.unit_price,
             count(*) AS charges, sum(c.quantity) AS quantity, sum(c.amount) AS amount,
             sum(('x' || encode(substr(sha256(convert_to(origin_event_id::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint) AS digest
      FROM c
      GROUP BY c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced, c.aggregation, c.unit_price) g
CROSS JOIN last
ORDER BY g.currency, g.meter_code, g.price_version, g.dimensions_key, g.unpriced, g.aggregation, g.unit_price;

-- name: LockCloseTally :one
-- LockCloseTally takes (creating it at the start) the progress row of a
-- period's chunked tally, locked: two closers of one period take their
-- chunks one after the other, each from the position the last committed.
INSERT INTO close_tally (tenant_id, period) VALUES (@tenant_id, @period)
ON CONFLICT (tenant_id, period) DO UPDATE SET tenant_id = excluded.tenant_id
RETURNING after_usage, after_origin, chunks, done, values_done, value_currency, value_meter_code, value_price_version,
          value_dimensions_key::text AS value_dimensions_key, value_unpriced, value_value::text AS value_value;

-- name: TallyValueChunk :many
-- One chunk of the count of a close's distinct values: the next chunk_size
-- rows of invoice_line_value of a tenant's period after the position (its
-- key), one range scan of its primary key bounded by the chunk, counted by
-- line. Every row carries the chunk's last key; no row: none after it.
WITH v AS (
    SELECT v.currency, v.meter_code, v.price_version, v.dimensions_key, v.unpriced, v.value
    FROM invoice_line_value v
    WHERE v.tenant_id = @tenant_id AND v.period = @period
      AND (v.currency, v.meter_code, v.price_version, v.dimensions_key, v.unpriced, v.value)
        > (sqlc.arg(after_currency)::text, sqlc.arg(after_meter_code)::text, sqlc.arg(after_price_version)::bigint,
           sqlc.arg(after_dimensions_key)::text COLLATE "C", sqlc.arg(after_unpriced)::boolean,
           sqlc.arg(after_value)::text COLLATE "C")
    ORDER BY v.currency, v.meter_code, v.price_version, v.dimensions_key, v.unpriced, v.value
    LIMIT sqlc.arg(chunk_size)::int
), last AS (
    SELECT * FROM v
    ORDER BY v.currency DESC, v.meter_code DESC, v.price_version DESC, v.dimensions_key DESC, v.unpriced DESC, v.value DESC
    LIMIT 1
)
SELECT g.currency::text AS currency, g.meter_code::text AS meter_code, g.price_version::bigint AS price_version,
       g.dimensions_key::text AS dimensions_key, g.unpriced::boolean AS unpriced, g.n::bigint AS n,
       last.currency::text AS last_currency, last.meter_code::text AS last_meter_code,
       last.price_version::bigint AS last_price_version, last.dimensions_key::text AS last_dimensions_key,
       last.unpriced::boolean AS last_unpriced, last.value::text AS last_value
FROM (SELECT v.currency, v.meter_code, v.price_version, v.dimensions_key, v.unpriced, count(*) AS n
      FROM v GROUP BY v.currency, v.meter_code, v.price_version, v.dimensions_key, v.unpriced) g
CROSS JOIN last
ORDER BY g.currency, g.meter_code, g.price_version, g.dimensions_key, g.unpriced;

-- name: AddCloseTallyValues :exec
-- AddCloseTallyValues adds one chunk's counts of distinct values to the
-- tally's unique_count lines.
UPDATE close_tally_line l SET distinct_values = l.distinct_values + u.n
FROM (SELECT unnest(@currencies::text[]) AS currency, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@price_versions::bigint[]) AS price_version, unnest(@dimensions_keys::text[]) AS dimensions_key,
             unnest(@unpriceds::boolean[]) AS unpriced, unnest(@counts::bigint[]) AS n) u
WHERE l.tenant_id = @tenant_id AND l.period = @period AND l.currency = u.currency AND l.meter_code = u.meter_code
  AND l.price_version = u.price_version AND l.dimensions_key = u.dimensions_key AND l.unpriced = u.unpriced
  AND l.aggregation = 'unique_count';

-- name: AdvanceValueTally :exec
-- AdvanceValueTally records the key the count of distinct values reached,
-- in the chunk's transaction, and whether it is done.
UPDATE close_tally
SET value_currency = @value_currency, value_meter_code = @value_meter_code, value_price_version = @value_price_version,
    value_dimensions_key = @value_dimensions_key, value_unpriced = @value_unpriced, value_value = @value_value,
    values_done = @values_done
WHERE tenant_id = @tenant_id AND period = @period;

-- name: AddCloseTallyLines :exec
-- AddCloseTallyLines adds one chunk's tally (TallyChargeChunk) to its
-- period's running line sums: a few rows whatever the chunk's size.
INSERT INTO close_tally_line AS l (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced,
                                   aggregation, unit_price, charges, quantity, amount, digest)
SELECT @tenant_id::text, @period::text, u.currency, u.meter_code, u.price_version, u.dimensions_key, u.unpriced,
       u.aggregation, u.unit_price, u.charges, u.quantity, u.amount, u.digest::numeric
FROM (SELECT unnest(@currencies::text[]) AS currency, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@price_versions::bigint[]) AS price_version, unnest(@dimensions_keys::text[]) AS dimensions_key,
             unnest(@unpriceds::boolean[]) AS unpriced, unnest(@aggregations::text[]) AS aggregation,
             unnest(@unit_prices::numeric[]) AS unit_price, unnest(@charge_counts::bigint[]) AS charges,
             unnest(@quantities::numeric[]) AS quantity, unnest(@amounts::numeric[]) AS amount,
             unnest(@digests::text[]) AS digest) u
ON CONFLICT (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced, aggregation, unit_price)
DO UPDATE SET charges = l.charges + excluded.charges, quantity = l.quantity + excluded.quantity,
              amount = l.amount + excluded.amount, digest = l.digest + excluded.digest;

-- name: AdvanceCloseTally :exec
-- AdvanceCloseTally records the position a chunk reached, in the chunk's
-- transaction, and whether the walk is done.
UPDATE close_tally
SET after_usage = @after_usage, after_origin = @after_origin, chunks = chunks + 1, done = @done
WHERE tenant_id = @tenant_id AND period = @period;

-- name: CloseTallyLines :many
-- CloseTallyLines reads a period's tallied lines: O(lines).
SELECT currency, meter_code, price_version, dimensions_key::text AS dimensions_key, unpriced, aggregation, unit_price,
       charges, quantity, amount, digest::text AS digest, distinct_values
FROM close_tally_line
WHERE tenant_id = @tenant_id AND period = @period;

-- name: ResetCloseTallyLines :exec
-- ResetCloseTallyLines and ResetCloseTally forget a period's tally (its
-- charges were not all there: the next close walks them again).
DELETE FROM close_tally_line WHERE tenant_id = @tenant_id AND period = @period;

-- name: ResetCloseTally :exec
DELETE FROM close_tally WHERE tenant_id = @tenant_id AND period = @period;

-- name: ChargeLineSums :many
-- ChargeLineSums gives an invoice's lines (one per meter, price version,
-- price dimensions and unpriced; charge lines first), whose charges' count
-- and sums the close tallied chunk by chunk (TallyChargeChunk) and passes
-- in, with the number of distinct values of a unique_count line, counted
-- chunk by chunk too (TallyValueChunk), and what prices them: the
-- version's pricing when recorded (NULL: none) and the running figure of a
-- max or latest line (NULL: none). O(lines) rows read. The caller
-- computes and prices each line (domain.Group) and writes it
-- (InsertChargeLines).
SELECT g.meter_code::text AS meter_code, g.price_version::bigint AS price_version, g.dimensions_key::text AS dimensions_key,
       g.unpriced::boolean AS unpriced, g.aggregation::text AS aggregation, g.unit_price::numeric AS unit_price,
       g.quantity::numeric AS quantity, g.charge_count::bigint AS charge_count, g.amount::numeric AS amount,
       vp.pricing, f.quantity AS figure,
       g.distinct_values::bigint AS distinct_values
FROM (SELECT unnest(@meter_codes::text[]) AS meter_code, unnest(@price_versions::bigint[]) AS price_version,
             unnest(@dimensions_keys::text[]) AS dimensions_key, unnest(@unpriceds::boolean[]) AS unpriced,
             unnest(@aggregations::text[]) AS aggregation, unnest(@unit_prices::numeric[]) AS unit_price,
             unnest(@quantities::numeric[]) AS quantity, unnest(@charge_counts::bigint[]) AS charge_count,
             unnest(@amounts::numeric[]) AS amount, unnest(@distincts::bigint[]) AS distinct_values) g
LEFT JOIN invoice_price_version vp
       ON vp.tenant_id = @tenant_id::text AND vp.currency = @currency::text AND vp.meter_code = g.meter_code
      AND vp.price_version = g.price_version
      -- a plan's line: its key holds the pair %40plan=<code> (domain.LineKey)
      AND vp.price_key = CASE WHEN g.dimensions_key ~ '(^|&)%40plan=' THEN g.dimensions_key ELSE '' END
LEFT JOIN invoice_line_figure f
       ON f.tenant_id = @tenant_id::text AND f.period = @period::text AND f.currency = @currency::text
      AND f.meter_code = g.meter_code AND f.price_version = g.price_version AND f.dimensions_key = g.dimensions_key
      AND f.unpriced = g.unpriced
ORDER BY g.unpriced, g.meter_code, g.price_version, g.dimensions_key, g.aggregation, g.unit_price;

-- name: InsertChargeLines :exec
-- Writes an invoice's charge and unpriced lines, computed and priced.
INSERT INTO invoice_line (invoice_id, kind, meter_code, price_version, dimensions_key, unit_price, quantity, charge_count, amount)
SELECT @invoice_id::uuid, u.kind, u.meter_code, u.price_version, u.dimensions_key, u.unit_price, u.quantity, u.charge_count, u.amount
FROM (SELECT unnest(@kinds::text[]) AS kind, unnest(@meter_codes::text[]) AS meter_code,
             unnest(@price_versions::bigint[]) AS price_version, unnest(@dimensions_keys::text[]) AS dimensions_key,
             unnest(@unit_prices::numeric[]) AS unit_price, unnest(@quantities::numeric[]) AS quantity,
             unnest(@charge_counts::bigint[]) AS charge_count, unnest(@amounts::numeric[]) AS amount) u;

-- name: ListStoredLines :many
-- ListStoredLines reads the lines stored for the invoices: every line of an
-- issued invoice, the adjustment lines of an open one. Charge lines first,
-- by meter, price version and dimensions, then the unpriced lines by meter,
-- then adjustments in arrival order, then the rounding line, then the tax
-- lines in their rates' order, then the credit lines in their draw order.
-- At most row_limit lines (NULL: all).
SELECT invoice_id, line_id, kind, origin_event_id, meter_code, price_version, dimensions_key::text AS dimensions_key,
       quantity, charge_count, amount, COALESCE(plan_code, '')::text AS plan_code, COALESCE(plan_version, 0)::bigint AS plan_version,
       COALESCE(fee_code, '')::text AS fee_code, COALESCE(fee_name, '')::text AS fee_name,
       COALESCE(days, 0)::int AS days, COALESCE(period_days, 0)::int AS period_days,
       COALESCE(tax_code, '')::text AS tax_code, COALESCE(tax_name, '')::text AS tax_name,
       COALESCE(tax_rate, 0)::numeric AS tax_rate, grant_id
FROM invoice_line
WHERE invoice_id = ANY(@invoice_ids::uuid[])
ORDER BY invoice_id, CASE kind WHEN 'charge' THEN 0 WHEN 'unpriced' THEN 1 WHEN 'fixed_fee' THEN 2 WHEN 'minimum_true_up' THEN 3
                                WHEN 'adjustment' THEN 4 WHEN 'rounding' THEN 5 WHEN 'tax' THEN 6 ELSE 7 END,
         meter_code, price_version, dimensions_key, plan_code, plan_version, fee_code, line_id
LIMIT sqlc.narg(row_limit)::int;

-- name: ReconciliationCharges :many
-- ReconciliationCharges reads a page of the charges a tenant's invoices of
-- a period count, each with the line that counts it, in (usage event id,
-- origin event id) order after a position.
SELECT i.invoice_id, (i.status = 'issued')::bool AS issued, i.period, i.currency,
       c.origin_event_id, c.usage_event_id, c.meter_code, c.price_version, c.dimensions_key::text AS dimensions_key,
       c.unpriced, c.quantity, c.amount
FROM invoice_charge c
JOIN invoice i ON i.tenant_id = c.tenant_id AND i.period = c.period AND i.currency = c.currency
WHERE c.tenant_id = @tenant_id AND c.period = @period
  AND (c.usage_event_id, c.origin_event_id) > (@after_key::uuid, @after_id::uuid)
ORDER BY c.usage_event_id, c.origin_event_id
LIMIT @row_limit;

-- name: ReconciliationLines :many
-- ReconciliationLines reads a page of the adjustment and rounding lines of
-- a tenant's invoices of a period, in origin event id order after a
-- position.
SELECT i.invoice_id, (i.status = 'issued')::bool AS issued, i.period, i.currency,
       l.origin_event_id::uuid AS origin_event_id, l.kind, l.amount
FROM invoice_line l JOIN invoice i ON i.invoice_id = l.invoice_id
WHERE i.tenant_id = @tenant_id AND i.period = @period AND l.kind IN ('adjustment', 'rounding')
  AND l.origin_event_id > @after::uuid
ORDER BY l.origin_event_id
LIMIT @row_limit;

-- name: InsertCreditGrant :exec
INSERT INTO credit_grant (grant_id, tenant_id, currency, amount, balance, effective_at, expires_at, priority, reason, actor, created_at)
VALUES (@grant_id, @tenant_id, @currency, @amount, @amount, @effective_at, @expires_at, @priority, @reason, @actor, @created_at);

-- name: LockTenantGrants :exec
-- A tenant's grants are created one at a time (their count is bounded).
SELECT pg_advisory_xact_lock(hashtextextended(@tenant_id::text, 7401))::text;

-- name: CountLiveGrants :one
-- The tenant's grants with something left that has not expired at @at.
SELECT count(*) FROM credit_grant
WHERE tenant_id = @tenant_id AND balance > 0 AND (expires_at IS NULL OR expires_at > @at::timestamptz);

-- name: ListCreditGrants :many
-- A page of a tenant's grants in (created_at, grant_id) order after a
-- position.
SELECT grant_id, tenant_id, currency, amount, balance, effective_at, expires_at, priority, reason, actor, created_at
FROM credit_grant
WHERE tenant_id = @tenant_id AND (created_at, grant_id) > (@after_created_at::timestamptz, @after_id::uuid)
ORDER BY created_at, grant_id
LIMIT @max_rows;

-- name: DrawableGrants :many
-- The grants an invoice of the tenant's currency may draw from, locked:
-- in effect at @at (the period's end) with something left, in draw order
-- (lowest priority, earliest expiry, oldest; DESIGN.md section 3a).
SELECT grant_id, balance FROM credit_grant
WHERE tenant_id = @tenant_id AND currency = @currency AND balance > 0
  AND effective_at <= @at::timestamptz AND (expires_at IS NULL OR expires_at > @at::timestamptz)
ORDER BY priority, expires_at NULLS LAST, created_at, grant_id
LIMIT @max_rows
FOR UPDATE;

-- name: DrawGrants :exec
-- Takes what an invoice draws from each grant.
UPDATE credit_grant g SET balance = g.balance - d.amount
FROM (SELECT unnest(@grant_ids::uuid[]) AS grant_id, unnest(@amounts::numeric[]) AS amount) d
WHERE g.grant_id = d.grant_id;

-- name: InsertCreditLines :exec
-- Writes an invoice's credit_applied lines (negative amounts), in draw
-- order, from the close that issues it.
INSERT INTO invoice_line (invoice_id, origin_event_id, kind, grant_id, amount)
SELECT @invoice_id::uuid, @origin_event_id::uuid, 'credit_applied', u.grant_id, u.amount
FROM (SELECT unnest(@grant_ids::uuid[]) AS grant_id, unnest(@amounts::numeric[]) AS amount) u;

-- name: LockTenantAlerts :exec
-- A tenant's alerts are created one at a time (their count is bounded).
SELECT pg_advisory_xact_lock(hashtextextended(@tenant_id::text, 7402))::text;

-- name: CountLiveAlerts :one
SELECT count(*) FROM invoice_alert WHERE tenant_id = @tenant_id AND deleted_at IS NULL;

-- name: InsertAlert :exec
INSERT INTO invoice_alert (alert_id, tenant_id, kind, meter_code, currency, threshold, actor, created_at)
VALUES (@alert_id, @tenant_id, @kind, sqlc.narg(meter_code), sqlc.narg(currency), @threshold, @actor, @created_at);

-- name: ListAlerts :many
-- A page of a tenant's live alerts in (created_at, alert_id) order after a
-- position.
SELECT alert_id, tenant_id, kind, meter_code, currency, threshold, actor, created_at
FROM invoice_alert
WHERE tenant_id = @tenant_id AND deleted_at IS NULL
  AND (created_at, alert_id) > (@after_created_at::timestamptz, @after_id::uuid)
ORDER BY created_at, alert_id
LIMIT @max_rows;

-- name: DeleteAlert :execrows
-- Deletes a live alert: its row stays (its crossings name it).
UPDATE invoice_alert SET deleted_at = @deleted_at, deleted_by = @deleted_by
WHERE tenant_id = @tenant_id AND alert_id = @alert_id AND deleted_at IS NULL;

-- name: PendingAlerts :many
-- The live alerts of the tenants that have not reached their threshold in
-- the period given beside each tenant (the pairs @tenant_ids[i],
-- @periods[i]), in alert_id order, unlocked: when none is pending, a
-- batch of charges decides no alert and waits on nothing (LockAlerts).
SELECT a.alert_id, a.tenant_id, p.period::text AS period, a.kind, a.meter_code, a.currency, a.threshold
FROM invoice_alert a
JOIN (SELECT DISTINCT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period) p
  ON p.tenant_id = a.tenant_id
WHERE a.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM invoice_alert_crossing x WHERE x.alert_id = a.alert_id AND x.period = p.period)
ORDER BY a.alert_id, p.period;

-- name: LockAlerts :many
-- LockAlerts locks the live alerts given, in alert_id order (so two
-- transactions lock them in one order), and returns those still live: the
-- transactions applying one tenant's charges decide its pending alerts one
-- at a time, each in statements after the lock, which see the charges
-- committed before it (READ COMMITTED).
SELECT alert_id FROM invoice_alert
WHERE alert_id = ANY(@alert_ids::uuid[]) AND deleted_at IS NULL
ORDER BY alert_id
FOR UPDATE;

-- name: MeterPeriodFigures :many
-- MeterPeriodFigures is, per meter of the tenant's period among
-- @meter_codes, what its period quantity is computed from, over every
-- charge of the period (priced or not, every currency): the sum of the
-- charges' quantities and their count (from the batches' parts, a few rows
-- per batch), the largest figure of its max lines, the figure of its
-- latest line with the latest charge, and the distinct values of its
-- unique_count lines (counted across its lines: the sum of what each batch
-- added to the meter's set, invoice_meter_value_part, a row per batch, not
-- a count of the set).
WITH ch AS (
    SELECT p.meter_code, min(p.aggregation) AS aggregation, sum(p.quantity) AS total, sum(p.charges) AS charges
    FROM invoice_line_part p
    WHERE p.tenant_id = @tenant_id::text AND p.period = @period::text AND p.meter_code = ANY(@meter_codes::text[])
    GROUP BY p.meter_code
)
SELECT ch.meter_code, ch.aggregation::text AS aggregation, ch.total::numeric AS total, ch.charges::bigint AS charges,
       coalesce((SELECT max(f.quantity) FROM invoice_line_figure f
        WHERE f.tenant_id = @tenant_id::text AND f.period = @period::text AND f.meter_code = ch.meter_code
          AND f.aggregation = 'max'), 0)::numeric AS max_figure,
       coalesce((SELECT f.quantity FROM invoice_line_figure f
        WHERE f.tenant_id = @tenant_id::text AND f.period = @period::text AND f.meter_code = ch.meter_code
          AND f.aggregation = 'latest'
        ORDER BY f.latest_at DESC, f.latest_source_system DESC, f.latest_source_event_id DESC
        LIMIT 1), 0)::numeric AS latest_figure,
       coalesce((SELECT sum(m.new_values) FROM invoice_meter_value_part m
        WHERE m.tenant_id = @tenant_id::text AND m.period = @period::text AND m.meter_code = ch.meter_code), 0)::bigint AS distinct_values
FROM ch
ORDER BY ch.meter_code;

-- name: RecordCrossings :many
-- RecordCrossings records that alerts reached their thresholds in a period,
-- once per (alert, period): it returns the crossings it wrote, not those
-- recorded before.
INSERT INTO invoice_alert_crossing (alert_id, period, crossing_id, tenant_id, value, cause_event_id, crossed_at)
SELECT unnest(@alert_ids::uuid[]), unnest(@periods::text[]), unnest(@crossing_ids::uuid[]), unnest(@tenant_ids::text[]),
       unnest(@values::numeric[]), unnest(@cause_event_ids::uuid[]), @crossed_at::timestamptz
ON CONFLICT (alert_id, period) DO NOTHING
RETURNING alert_id, period, crossing_id;

-- name: PartLineSums :many
-- PartLineSums is ChargeLineSums of the open invoice of a tenant's period
-- and currency summed from the batches' parts (invoice_line_part), a few
-- rows per batch, not from its charges, and the distinct values of its
-- unique_count lines from what each batch added to their sets
-- (invoice_line_value_part): the running total a spend alert watches.
SELECT g.meter_code, g.price_version, g.dimensions_key::text AS dimensions_key, g.unpriced, g.aggregation, g.unit_price,
       g.quantity::numeric AS quantity, g.charge_count::bigint AS charge_count, g.amount::numeric AS amount,
       vp.pricing, f.quantity AS figure,
       (CASE WHEN g.aggregation = 'unique_count' THEN (
            SELECT coalesce(sum(v.new_values), 0) FROM invoice_line_value_part v
            WHERE v.tenant_id = g.tenant_id AND v.period = g.period AND v.currency = g.currency
              AND v.meter_code = g.meter_code AND v.price_version = g.price_version
              AND v.dimensions_key = g.dimensions_key AND v.unpriced = g.unpriced) ELSE 0 END)::bigint AS distinct_values
FROM (SELECT p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced,
             p.aggregation, p.unit_price, sum(p.quantity) AS quantity, sum(p.charges) AS charge_count, sum(p.amount) AS amount
      FROM invoice_line_part p
      WHERE p.tenant_id = @tenant_id::text AND p.period = @period::text AND p.currency = @currency::text
      GROUP BY p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced,
               p.aggregation, p.unit_price) g
LEFT JOIN invoice_price_version vp
       ON vp.tenant_id = g.tenant_id AND vp.currency = g.currency AND vp.meter_code = g.meter_code
      AND vp.price_version = g.price_version
      -- a plan's line: its key holds the pair %40plan=<code> (domain.LineKey)
      AND vp.price_key = CASE WHEN g.dimensions_key ~ '(^|&)%40plan=' THEN g.dimensions_key ELSE '' END
LEFT JOIN invoice_line_figure f
       ON f.tenant_id = g.tenant_id AND f.period = g.period AND f.currency = g.currency AND f.meter_code = g.meter_code
      AND f.price_version = g.price_version AND f.dimensions_key = g.dimensions_key AND f.unpriced = g.unpriced
ORDER BY g.unpriced, g.meter_code, g.price_version, g.dimensions_key, g.aggregation, g.unit_price;

-- name: OpenAdjustments :one
-- OpenAdjustments is the sum of the adjustment lines of the open invoice
-- of a tenant's period and currency (0 without one), and whether it is open.
SELECT coalesce(sum(l.amount), 0)::numeric AS amount, coalesce(bool_or(i.status = 'open'), false)::boolean AS open
FROM invoice i
LEFT JOIN invoice_line l ON l.invoice_id = i.invoice_id AND l.kind = 'adjustment'
WHERE i.tenant_id = @tenant_id::text AND i.period = @period::text AND i.currency = @currency::text;

-- name: FoldParts :one
-- FoldParts replaces the parts of each line of the tenants' periods given
-- (and of each line's and meter's value set) that has more than @most of
-- them by one part, their sum: what PartLineSums and MeterPeriodFigures
-- read then stays at most @most + 1 rows a line however many batches the
-- period has had. A period another transaction is folding (its
-- transaction-scoped advisory lock taken, with pg_try_advisory_xact_lock)
-- is left to it: two folds would delete the same rows, one waiting for the
-- other or, in another order, deadlocking. Parts a concurrent batch has not
-- committed are not in the statement's snapshot and stay as they are; the
-- sums read before and after are the same. It returns the parts removed.
WITH tp AS (
    SELECT DISTINCT unnest(@tenant_ids::text[]) AS tenant_id, unnest(@periods::text[]) AS period
    ORDER BY 1, 2
), mine AS (
    SELECT tp.tenant_id, tp.period FROM tp
    WHERE pg_try_advisory_xact_lock(hashtextextended(
        'invoice.parts.' || length(tp.tenant_id) || ':' || tp.tenant_id || tp.period, 0))
), line_many AS (
    SELECT p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced,
           p.aggregation, p.unit_price
    FROM mine JOIN invoice_line_part p ON p.tenant_id = mine.tenant_id AND p.period = mine.period
    GROUP BY p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced,
             p.aggregation, p.unit_price
    HAVING count(*) > @most::int
), line_gone AS (
    DELETE FROM invoice_line_part p USING line_many m
    WHERE p.tenant_id = m.tenant_id AND p.period = m.period AND p.currency = m.currency
      AND p.meter_code = m.meter_code AND p.price_version = m.price_version AND p.dimensions_key = m.dimensions_key
      AND p.unpriced = m.unpriced AND p.aggregation = m.aggregation AND p.unit_price = m.unit_price
    RETURNING p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced,
              p.aggregation, p.unit_price, p.quantity, p.charges, p.amount
), line_sum AS (
    INSERT INTO invoice_line_part (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced,
                                   aggregation, unit_price, quantity, charges, amount)
    SELECT g.tenant_id, g.period, g.currency, g.meter_code, g.price_version, g.dimensions_key, g.unpriced,
           g.aggregation, g.unit_price, sum(g.quantity), sum(g.charges), sum(g.amount)
    FROM line_gone g
    GROUP BY g.tenant_id, g.period, g.currency, g.meter_code, g.price_version, g.dimensions_key, g.unpriced,
             g.aggregation, g.unit_price
    RETURNING 1
), value_many AS (
    SELECT p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced
    FROM mine JOIN invoice_line_value_part p ON p.tenant_id = mine.tenant_id AND p.period = mine.period
    GROUP BY p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced
    HAVING count(*) > @most::int
), value_gone AS (
    DELETE FROM invoice_line_value_part p USING value_many m
    WHERE p.tenant_id = m.tenant_id AND p.period = m.period AND p.currency = m.currency
      AND p.meter_code = m.meter_code AND p.price_version = m.price_version AND p.dimensions_key = m.dimensions_key
      AND p.unpriced = m.unpriced
    RETURNING p.tenant_id, p.period, p.currency, p.meter_code, p.price_version, p.dimensions_key, p.unpriced,
              p.new_values
), value_sum AS (
    INSERT INTO invoice_line_value_part (tenant_id, period, currency, meter_code, price_version, dimensions_key,
                                         unpriced, new_values)
    SELECT g.tenant_id, g.period, g.currency, g.meter_code, g.price_version, g.dimensions_key, g.unpriced,
           sum(g.new_values)
    FROM value_gone g
    GROUP BY g.tenant_id, g.period, g.currency, g.meter_code, g.price_version, g.dimensions_key, g.unpriced
    RETURNING 1
), meter_many AS (
    SELECT p.tenant_id, p.period, p.meter_code
    FROM mine JOIN invoice_meter_value_part p ON p.tenant_id = mine.tenant_id AND p.period = mine.period
    GROUP BY p.tenant_id, p.period, p.meter_code
    HAVING count(*) > @most::int
), meter_gone AS (
    DELETE FROM invoice_meter_value_part p USING meter_many m
    WHERE p.tenant_id = m.tenant_id AND p.period = m.period AND p.meter_code = m.meter_code
    RETURNING p.tenant_id, p.period, p.meter_code, p.new_values
), meter_sum AS (
    INSERT INTO invoice_meter_value_part (tenant_id, period, meter_code, new_values)
    SELECT g.tenant_id, g.period, g.meter_code, sum(g.new_values)
    FROM meter_gone g
    GROUP BY g.tenant_id, g.period, g.meter_code
    RETURNING 1
)
SELECT ((SELECT count(*) FROM line_gone) + (SELECT count(*) FROM value_gone) + (SELECT count(*) FROM meter_gone)
        - (SELECT count(*) FROM line_sum) - (SELECT count(*) FROM value_sum) - (SELECT count(*) FROM meter_sum))::bigint
       AS removed;
