-- Draft invoices (decision 0014): billing's BillingPeriodEnded says a
-- tenant's period ended and is in its grace period until closes_at. The
-- period's open invoices read as draft from then until the close issues
-- them. One row per period; nothing else changes (an invoice's stored status
-- stays open until issue).
CREATE TABLE period_grace (
    tenant_id text        NOT NULL,
    period    text        NOT NULL,
    ended_at  timestamptz NOT NULL,
    closes_at timestamptz NOT NULL,
    event_id  uuid        NOT NULL,
    PRIMARY KEY (tenant_id, period)
);
