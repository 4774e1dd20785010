-- Usage and spend alerts (DESIGN.md section 3a): a tenant's thresholds on a
-- meter's period quantity (usage: the meter's aggregation over the period's
-- charges) or on a currency's running total (spend: the open invoice's
-- subtotal so far). A deleted alert keeps its row (its crossings name it),
-- with deleted_at set; at most INVOICE_MAX_ALERTS are live per tenant.
CREATE TABLE invoice_alert (
    alert_id   uuid        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    kind       text        NOT NULL,
    meter_code text,
    currency   text,
    threshold  numeric     NOT NULL CHECK (threshold > 0),
    actor      text        NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 256),
    created_at timestamptz NOT NULL,
    deleted_at timestamptz,
    deleted_by text,
    CONSTRAINT invoice_alert_kind_check CHECK (kind IN ('usage', 'spend')),
    CONSTRAINT invoice_alert_shape_check CHECK (CASE WHEN kind = 'usage'
        THEN meter_code IS NOT NULL AND currency IS NULL
        ELSE currency ~ '^[A-Z]{3}$' AND meter_code IS NULL END),
    CONSTRAINT invoice_alert_deleted_check CHECK ((deleted_at IS NULL) = (deleted_by IS NULL))
);
-- A tenant's list (creation order) and the alerts a charge may cross.
CREATE INDEX invoice_alert_live ON invoice_alert (tenant_id, created_at, alert_id) WHERE deleted_at IS NULL;

-- One row per (alert, period) whose threshold the running figure reached:
-- the primary key is what makes an alert tell once per period, whatever
-- redelivers, replays or crashes, and however often the figure falls below
-- (a credit) and rises again. Written in the transaction that applies the
-- charges (or the adjustment) that reached it, with its webhook intents.
CREATE TABLE invoice_alert_crossing (
    alert_id       uuid        NOT NULL REFERENCES invoice_alert (alert_id),
    period         text        NOT NULL,
    crossing_id    uuid        NOT NULL UNIQUE,
    tenant_id      text        NOT NULL,
    value          numeric     NOT NULL,
    cause_event_id uuid        NOT NULL,
    crossed_at     timestamptz NOT NULL,
    PRIMARY KEY (alert_id, period)
);
