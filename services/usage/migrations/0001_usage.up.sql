-- Price evidence replicated from the meter's PriceActivated events: which
-- price version of a series is effective from when. Usage prices a fact
-- from this table only; it never asks the meter. event_id is the origin
-- event (a redelivery is a unique violation, so a DUPLICATE).
CREATE TABLE price_evidence (
    tenant_id    text        NOT NULL,
    meter_code   text        NOT NULL,
    currency     text        NOT NULL,
    version      bigint      NOT NULL CHECK (version >= 1),
    price_id     uuid        NOT NULL,
    unit_price   numeric     NOT NULL CHECK (unit_price >= 0),
    effective_at timestamptz NOT NULL,
    event_id     uuid        NOT NULL CONSTRAINT price_evidence_event_id_key UNIQUE,
    applied_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, meter_code, currency, version)
);

-- Accepted usage facts, one per (tenant, sourceSystem, sourceEventId),
-- never updated. event_id is the UsageAccepted event that announced it.
CREATE TABLE usage_fact (
    usage_id        uuid        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    source_system   text        NOT NULL,
    source_event_id text        NOT NULL,
    meter_code      text        NOT NULL,
    quantity        numeric     NOT NULL CHECK (quantity >= 0),
    occurred_at     timestamptz NOT NULL,
    currency        text        NOT NULL,
    price_version   bigint      NOT NULL CHECK (price_version >= 1),
    event_id        uuid        NOT NULL CONSTRAINT usage_fact_event_id_key UNIQUE,
    accepted_at     timestamptz NOT NULL,
    CONSTRAINT usage_fact_source_key UNIQUE (tenant_id, source_system, source_event_id)
);
