-- One row per price series (tenant, meter, currency). Activating a price
-- locks it, so versions are gap-free and each activation sees the schedule
-- of the one before.
CREATE TABLE price_series (
    tenant_id         text        NOT NULL,
    meter_code        text        NOT NULL,
    currency          text        NOT NULL,
    last_version      bigint      NOT NULL DEFAULT 0 CHECK (last_version >= 0),
    last_effective_at timestamptz,
    PRIMARY KEY (tenant_id, meter_code, currency)
);

-- Immutable price versions. event_id is the PriceActivated event that
-- announced the version (its origin for reconciliation).
CREATE TABLE price (
    price_id     uuid        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    meter_code   text        NOT NULL,
    currency     text        NOT NULL,
    version      bigint      NOT NULL CHECK (version >= 1),
    unit_price   numeric     NOT NULL CHECK (unit_price >= 0),
    effective_at timestamptz NOT NULL,
    activated_at timestamptz NOT NULL CHECK (effective_at >= activated_at),
    event_id     uuid        NOT NULL CONSTRAINT price_event_id_key UNIQUE,
    CONSTRAINT price_version_key UNIQUE (tenant_id, meter_code, currency, version),
    CONSTRAINT price_series_fkey FOREIGN KEY (tenant_id, meter_code, currency) REFERENCES price_series
);

-- A price version is never edited or deleted: a past price is corrected by
-- an adjustment, not by rewriting history.
CREATE FUNCTION price_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'price versions are immutable' USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER price_immutable BEFORE UPDATE OR DELETE ON price
    FOR EACH ROW EXECUTE FUNCTION price_immutable();
