-- name: AddLine :one
-- AddLine puts a charge or adjustment line on the open invoice of its tenant,
-- period and currency, creating the invoice when it has none, unless the
-- period is closed. One round trip. It reports whether the period is closed,
-- the invoice it found or created (the zero uuid when none), its status and
-- whether the line was added. A concurrent creation of the same invoice
-- leaves no invoice and no line (the caller retries).
WITH closed AS (
    SELECT EXISTS (
        SELECT 1 FROM period_close pc
        WHERE pc.tenant_id = @tenant_id::text AND pc.period = @period::text) AS closed
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
    SELECT t.invoice_id, @origin_event_id::uuid, @kind::text, @amount::numeric FROM target t
    WHERE t.status = 'open' AND NOT (SELECT c.closed FROM closed c)
    RETURNING invoice_id
)
SELECT (SELECT c.closed FROM closed c)::boolean AS closed,
       COALESCE((SELECT t.invoice_id FROM target t), '00000000-0000-0000-0000-000000000000')::uuid AS invoice_id,
       COALESCE((SELECT t.status FROM target t), '')::text AS status,
       EXISTS (SELECT 1 FROM line) AS added;

-- name: RecordClose :exec
-- RecordClose records a period's close; a second close of the same period is
-- a unique violation (the close's effect already exists).
INSERT INTO period_close (tenant_id, period, close_event_id, closed_at, charges, adjustments)
VALUES (@tenant_id, @period, @close_event_id, @closed_at, @charges, @adjustments);

-- name: TallyInvoices :many
-- TallyInvoices locks the invoices of a tenant's period and counts and sums
-- their charge and adjustment lines.
SELECT i.invoice_id, i.currency, i.status,
       t.charges::bigint AS charges, t.adjustments::bigint AS adjustments, t.subtotal::numeric AS subtotal
FROM invoice i,
     LATERAL (
         SELECT count(*) FILTER (WHERE l.kind = 'charge') AS charges,
                count(*) FILTER (WHERE l.kind = 'adjustment') AS adjustments,
                COALESCE(sum(l.amount) FILTER (WHERE l.kind IN ('charge', 'adjustment')), 0) AS subtotal
         FROM invoice_line l WHERE l.invoice_id = i.invoice_id
     ) t
WHERE i.tenant_id = @tenant_id AND i.period = @period
ORDER BY i.currency
FOR UPDATE OF i;

-- name: AddRoundingLine :exec
INSERT INTO invoice_line (invoice_id, origin_event_id, kind, amount)
VALUES (@invoice_id, @origin_event_id, 'rounding', @amount);

-- name: IssueInvoice :execrows
UPDATE invoice
SET status = 'issued', subtotal = @subtotal::numeric, total = @total::numeric, issued_at = @issued_at::timestamptz,
    close_event_id = @close_event_id::uuid, issued_event_id = @issued_event_id::uuid
WHERE invoice_id = @invoice_id AND status = 'open';

-- name: LockIssuedInvoice :one
-- LockIssuedInvoice locks an issued invoice and returns the aggregate version
-- its next correction takes (InvoiceIssued is version 1).
SELECT i.invoice_id,
       (SELECT COALESCE(max(c.version), 1) + 1 FROM invoice_correction c WHERE c.invoice_id = i.invoice_id)::bigint AS next_version
FROM invoice i
WHERE i.invoice_id = @invoice_id AND i.status = 'issued'
FOR UPDATE OF i;

-- name: AddCorrection :execrows
-- AddCorrection records a correction note, unless the adjustment is already a
-- line of the invoice (it then has its effect).
INSERT INTO invoice_correction (correction_id, invoice_id, origin_event_id, amount, issued_at, version, event_id)
SELECT @correction_id, @invoice_id, @origin_event_id, @amount, @issued_at, @version, @event_id
WHERE NOT EXISTS (
    SELECT 1 FROM invoice_line l WHERE l.origin_event_id = @origin_event_id AND l.kind <> 'rounding');

-- name: GetInvoice :one
SELECT invoice_id, tenant_id, period, currency, status, subtotal, total, issued_at
FROM invoice
WHERE tenant_id = @tenant_id AND invoice_id = @invoice_id;

-- name: ListInvoices :many
SELECT invoice_id, tenant_id, period, currency, status, subtotal, total, issued_at
FROM invoice
WHERE tenant_id = @tenant_id AND (sqlc.narg(period)::text IS NULL OR period = sqlc.narg(period)::text)
ORDER BY period, currency, invoice_id;

-- name: ListLines :many
SELECT invoice_id, origin_event_id, kind, amount
FROM invoice_line
WHERE invoice_id = ANY(@invoice_ids::uuid[])
ORDER BY invoice_id, line_id;

-- name: ListCorrections :many
SELECT correction_id, invoice_id, origin_event_id, amount, issued_at
FROM invoice_correction
WHERE invoice_id = ANY(@invoice_ids::uuid[])
ORDER BY invoice_id, version;

-- name: ReconciliationLines :many
-- ReconciliationLines lists the lines of a tenant's invoices of the given
-- periods, for reconciliation by origin event id.
SELECT i.invoice_id, (i.status = 'issued')::bool AS issued, i.period, i.currency,
       l.origin_event_id, l.kind, l.amount
FROM invoice_line l JOIN invoice i ON i.invoice_id = l.invoice_id
WHERE i.tenant_id = @tenant_id AND i.period = ANY(@periods::text[])
ORDER BY l.line_id;

-- name: ReconciliationCorrections :many
SELECT c.invoice_id, i.period, c.origin_event_id, c.amount
FROM invoice_correction c JOIN invoice i ON i.invoice_id = c.invoice_id
WHERE i.tenant_id = @tenant_id AND i.period = ANY(@periods::text[])
ORDER BY c.origin_event_id;
