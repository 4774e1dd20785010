-- Invoices: one per tenant, period and currency, created on demand (open) by
-- its first line and issued once, when billing closes the period.
CREATE TABLE invoice (
    invoice_id     uuid        PRIMARY KEY,
    tenant_id      text        NOT NULL,
    period         text        NOT NULL,
    currency       text        NOT NULL,
    status         text        NOT NULL DEFAULT 'open',
    -- Set once, at issue: subtotal = exact sum of the charge and adjustment
    -- lines, total = subtotal rounded half-even to the currency's minor unit.
    subtotal       numeric,
    total          numeric,
    issued_at      timestamptz,
    -- The BillingPeriodClosed that issued it, and the InvoiceIssued event.
    close_event_id uuid,
    issued_event_id uuid,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT invoice_tenant_period_currency_key UNIQUE (tenant_id, period, currency),
    CONSTRAINT invoice_status_check CHECK (status IN ('open', 'issued')),
    CONSTRAINT invoice_issued_check CHECK (
        (status = 'open' AND subtotal IS NULL AND total IS NULL AND issued_at IS NULL
             AND close_event_id IS NULL AND issued_event_id IS NULL)
        OR (status = 'issued' AND subtotal IS NOT NULL AND total IS NOT NULL AND issued_at IS NOT NULL
             AND close_event_id IS NOT NULL AND issued_event_id IS NOT NULL))
);

-- Invoice lines are immutable: one per origin event (the ChargeRated or
-- AdjustmentPosted it came from), plus at most one rounding line per invoice
-- whose origin is the BillingPeriodClosed that issued it.
CREATE TABLE invoice_line (
    line_id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    invoice_id      uuid        NOT NULL REFERENCES invoice (invoice_id),
    origin_event_id uuid        NOT NULL,
    kind            text        NOT NULL,
    amount          numeric     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT invoice_line_kind_check CHECK (kind IN ('charge', 'adjustment', 'rounding'))
);
CREATE UNIQUE INDEX invoice_line_origin_key ON invoice_line (origin_event_id) WHERE kind <> 'rounding';
CREATE UNIQUE INDEX invoice_line_rounding_key ON invoice_line (invoice_id) WHERE kind = 'rounding';
CREATE INDEX invoice_line_invoice_idx ON invoice_line (invoice_id, line_id);

-- Correction notes: an adjustment that arrived after its invoice was issued.
-- version is the invoice aggregate's version of its InvoiceCorrectionIssued
-- (InvoiceIssued is version 1).
CREATE TABLE invoice_correction (
    correction_id   uuid        PRIMARY KEY,
    invoice_id      uuid        NOT NULL REFERENCES invoice (invoice_id),
    origin_event_id uuid        NOT NULL,
    amount          numeric     NOT NULL,
    issued_at       timestamptz NOT NULL,
    version         bigint      NOT NULL,
    event_id        uuid        NOT NULL,
    CONSTRAINT invoice_correction_origin_key UNIQUE (origin_event_id),
    CONSTRAINT invoice_correction_event_key UNIQUE (event_id),
    CONSTRAINT invoice_correction_version_key UNIQUE (invoice_id, version),
    CONSTRAINT invoice_correction_version_check CHECK (version >= 2)
);

-- The closes applied: one per tenant and period. A period with a row here has
-- every invoice issued; a charge for it is refused, an adjustment becomes a
-- correction note.
CREATE TABLE period_close (
    tenant_id      text        NOT NULL,
    period         text        NOT NULL,
    close_event_id uuid        NOT NULL,
    closed_at      timestamptz NOT NULL,
    charges        bigint      NOT NULL,
    adjustments    bigint      NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, period),
    CONSTRAINT period_close_event_key UNIQUE (close_event_id)
);

-- Nothing issued is edited: lines and corrections are insert-only, and an
-- issued invoice is never updated or deleted. The error is an integrity
-- violation (SQLSTATE 23000), which the inbox treats as permanent.
CREATE FUNCTION invoice_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% of % is not allowed: issued invoice data is immutable', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER invoice_line_immutable BEFORE UPDATE OR DELETE ON invoice_line
    FOR EACH ROW EXECUTE FUNCTION invoice_refuse_change();
CREATE TRIGGER invoice_correction_immutable BEFORE UPDATE OR DELETE ON invoice_correction
    FOR EACH ROW EXECUTE FUNCTION invoice_refuse_change();
CREATE TRIGGER invoice_issued_immutable BEFORE UPDATE OR DELETE ON invoice
    FOR EACH ROW WHEN (OLD.status = 'issued') EXECUTE FUNCTION invoice_refuse_change();
