-- Period lifecycle (decision 0014). A tenant's period settings: periods are
-- calendar months in time_zone, and close by themselves grace after their
-- end. A row applies from the period effective_from on (until the next
-- row's); a tenant without a row has UTC and one hour. A change only ever
-- adds or replaces the row of a period not yet begun, so a period keeps the
-- settings it began with.
CREATE TABLE tenant_settings (
    tenant_id      text        NOT NULL,
    effective_from text        NOT NULL CHECK (effective_from ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    time_zone      text        NOT NULL CHECK (char_length(time_zone) BETWEEN 1 AND 64),
    grace_seconds  bigint      NOT NULL CHECK (grace_seconds BETWEEN 0 AND 604800),
    actor          text        NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 256),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, effective_from)
);

-- A period that ended and went into grace: BillingPeriodEnded was appended
-- once (the close scheduler inserts the row and the event together).
CREATE TABLE period_ended (
    tenant_id text        NOT NULL,
    period    text        NOT NULL,
    ended_at  timestamptz NOT NULL,
    closes_at timestamptz NOT NULL,
    event_id  uuid        NOT NULL UNIQUE,
    PRIMARY KEY (tenant_id, period)
);

-- The close scheduler finds the periods that are not closed among those
-- with charges (a skip scan of charge_line_order) and those left closing.
CREATE INDEX billing_period_closing_idx ON billing_period (tenant_id, period) WHERE status = 'closing';
