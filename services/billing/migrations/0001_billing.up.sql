-- Price evidence replicated from meter's PriceActivated events. Billing rates
-- only from these rows; it never asks meter.
CREATE TABLE price_evidence (
    tenant_id    text        NOT NULL,
    meter_code   text        NOT NULL,
    currency     text        NOT NULL,
    version      bigint      NOT NULL CHECK (version >= 1),
    unit_price   numeric     NOT NULL CHECK (unit_price >= 0),
    effective_at timestamptz NOT NULL,
    price_id     uuid        NOT NULL,
    event_id     uuid        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, meter_code, currency, version),
    CONSTRAINT price_evidence_event_id_key UNIQUE (event_id)
);

-- One tenant's billing period: the aggregate billing_period/<period>.
-- version is the aggregate version of the last event appended for it (0 =
-- none yet); every ChargeRated, AdjustmentPosted and BillingPeriodClosed of
-- the period takes the next one under this row's lock.
CREATE TABLE billing_period (
    tenant_id      text        NOT NULL,
    period         text        NOT NULL CHECK (period ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    status         text        NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closing', 'closed')),
    version        bigint      NOT NULL DEFAULT 0 CHECK (version >= 0),
    created_at     timestamptz NOT NULL DEFAULT now(),
    closing_at     timestamptz,
    closed_at      timestamptz,
    close_event_id uuid,
    PRIMARY KEY (tenant_id, period)
);

-- Immutable charges: exactly one per usage fact. usage_event_id is the origin
-- event (the UsageAccepted it rated); event_id is the ChargeRated it emitted.
CREATE TABLE charge (
    charge_id         uuid        PRIMARY KEY,
    event_id          uuid        NOT NULL,
    usage_event_id    uuid        NOT NULL,
    usage_id          uuid        NOT NULL,
    tenant_id         text        NOT NULL,
    meter_code        text        NOT NULL,
    currency          text        NOT NULL,
    quantity          numeric     NOT NULL CHECK (quantity >= 0),
    unit_price        numeric     NOT NULL CHECK (unit_price >= 0),
    price_version     bigint      NOT NULL,
    amount            numeric     NOT NULL,
    period            text        NOT NULL,
    late              boolean     NOT NULL,
    occurred_at       timestamptz NOT NULL,
    aggregate_version bigint      NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT charge_amount_exact CHECK (amount = quantity * unit_price),
    CONSTRAINT charge_event_id_key UNIQUE (event_id),
    CONSTRAINT charge_usage_event_id_key UNIQUE (usage_event_id),
    CONSTRAINT charge_usage_id_key UNIQUE (tenant_id, usage_id)
);
CREATE INDEX charge_period ON charge (tenant_id, period, aggregate_version);

-- Adjustments: corrections of a charge, never edits. They belong to the
-- charge's period, closed or not.
CREATE TABLE adjustment (
    adjustment_id     uuid        PRIMARY KEY,
    event_id          uuid        NOT NULL,
    tenant_id         text        NOT NULL,
    correction_of     uuid        NOT NULL REFERENCES charge (charge_id),
    amount            numeric     NOT NULL CHECK (amount <> 0),
    currency          text        NOT NULL,
    reason            text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 500),
    period            text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT adjustment_event_id_key UNIQUE (event_id)
);
CREATE INDEX adjustment_period ON adjustment (tenant_id, period, aggregate_version);
CREATE INDEX adjustment_correction_of ON adjustment (correction_of);
