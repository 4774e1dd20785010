-- Every public event projected, one row per event id: the per-event facts
-- that reconciliation compares with the other services' effects by origin
-- event id. payload is the event's payload as received.
CREATE TABLE projected_event (
    event_id          uuid        NOT NULL,
    event_type        text        NOT NULL,
    tenant_id         text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    occurred_at       timestamptz NOT NULL,
    -- The id the event is about: priceId, usageId, chargeId, adjustmentId,
    -- invoiceId or correctionId.
    subject_id        uuid,
    -- The event this one derives from: a ChargeRated's UsageAccepted, an
    -- InvoiceCorrectionIssued's AdjustmentPosted.
    origin_event_id   uuid,
    period            text,        -- for usage: the month of its occurredAt
    meter_code        text,
    currency          text,
    quantity          numeric,
    unit_price        numeric,
    -- The money of the event: a charge's or adjustment's amount, an
    -- invoice's total, a correction's amount.
    amount            numeric,
    payload           jsonb       NOT NULL,
    projected_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT projected_event_pkey PRIMARY KEY (event_id)
);
CREATE INDEX projected_event_tenant_idx ON projected_event (tenant_id, event_type, period);
CREATE INDEX projected_event_origin_idx ON projected_event (origin_event_id) WHERE origin_event_id IS NOT NULL;

-- The lines of every InvoiceIssued, by origin event id.
CREATE TABLE projected_invoice_line (
    invoice_event_id uuid    NOT NULL REFERENCES projected_event (event_id),
    invoice_id       uuid    NOT NULL,
    tenant_id        text    NOT NULL,
    origin_event_id  uuid    NOT NULL,
    kind             text    NOT NULL,
    amount           numeric NOT NULL,
    CONSTRAINT projected_invoice_line_pkey PRIMARY KEY (invoice_id, origin_event_id, kind)
);
CREATE INDEX projected_invoice_line_origin_idx ON projected_invoice_line (origin_event_id);

-- What each projected event adds to its tenant's summary, waiting to be
-- folded into tenant_total and tenant_summary. Consumers only insert here (no
-- row of a tenant's totals is locked by the batches of several partitions);
-- reading a summary folds its tenant's rows first.
-- kind: usage (key = meter code, amount = quantity), charged, adjusted,
-- invoiced (key = currency), seen (no money: key and amount empty).
CREATE TABLE summary_delta (
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text        NOT NULL,
    kind        text        NOT NULL,
    key         text        NOT NULL,
    amount      numeric     NOT NULL,
    occurred_at timestamptz NOT NULL,
    CONSTRAINT summary_delta_kind_check CHECK (kind IN ('usage', 'charged', 'adjusted', 'invoiced', 'seen'))
);
CREATE INDEX summary_delta_tenant_idx ON summary_delta (tenant_id);

-- Folded totals: per tenant, kind and key, the sum and the number of events.
CREATE TABLE tenant_total (
    tenant_id text    NOT NULL,
    kind      text    NOT NULL,
    key       text    NOT NULL,
    amount    numeric NOT NULL,
    events    bigint  NOT NULL,
    PRIMARY KEY (tenant_id, kind, key)
);

-- Folded per tenant: events projected and the latest occurredAt.
CREATE TABLE tenant_summary (
    tenant_id     text        PRIMARY KEY,
    events        bigint      NOT NULL,
    last_event_at timestamptz NOT NULL
);
