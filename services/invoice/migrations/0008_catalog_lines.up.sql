-- Catalog lines (DESIGN.md section 3a): a line is one per (meter, price
-- version, price dimensions, unpriced), and its quantity is its meter's
-- aggregation over its charges.
--
-- A charge records its meter's aggregation ('sum' for charges from before
-- the catalog), the dimensions of the price that rated it (dimensions_key:
-- domain.DimensionsKey, '' for none; the key decodes back to the set) and
-- whether it was rated unpriced (price_version 0, amount 0).
ALTER TABLE invoice_charge
    ADD COLUMN aggregation    text    NOT NULL DEFAULT 'sum',
    ADD COLUMN dimensions_key text    COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN unpriced       boolean NOT NULL DEFAULT false;

DROP INDEX invoice_charge_line_idx;
CREATE INDEX invoice_charge_line_idx
    ON invoice_charge (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced, unit_price);

-- The running figure of each open max or latest line: the largest quantity
-- (max), or the quantity of the latest charge by (occurred_at,
-- source_system, source_event_id) (latest), raised by each charge's
-- statement only when the charge beats it, so its figure does not depend on
-- the order the charges arrive in, nor on a redelivery. Compared byte-wise
-- (COLLATE "C"), as Go compares strings (catalog.Observation.After).
CREATE TABLE invoice_line_figure (
    tenant_id       text        NOT NULL,
    period          text        NOT NULL,
    currency        text        NOT NULL,
    meter_code      text        NOT NULL,
    price_version   bigint      NOT NULL,
    dimensions_key  text        COLLATE "C" NOT NULL,
    unpriced        boolean     NOT NULL,
    aggregation     text        NOT NULL,
    quantity        numeric     NOT NULL,
    latest_at       timestamptz,
    latest_source_system   text COLLATE "C",
    latest_source_event_id text COLLATE "C",
    PRIMARY KEY (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced),
    CONSTRAINT invoice_line_figure_aggregation_check CHECK (aggregation IN ('max', 'latest')),
    CONSTRAINT invoice_line_figure_latest_check CHECK (aggregation <> 'latest' OR
        (latest_at IS NOT NULL AND latest_source_system IS NOT NULL AND latest_source_event_id IS NOT NULL))
);

-- The distinct values of each unique_count line: a line's quantity is its
-- number of rows, exact whatever the number of charges (the table grows
-- with the distinct values, not with the facts), the same in any order
-- (ON CONFLICT DO NOTHING on the key).
CREATE TABLE invoice_line_value (
    tenant_id      text    NOT NULL,
    period         text    NOT NULL,
    currency       text    NOT NULL,
    meter_code     text    NOT NULL,
    price_version  bigint  NOT NULL,
    dimensions_key text    COLLATE "C" NOT NULL,
    unpriced       boolean NOT NULL,
    value          text    COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced, value)
);

-- Stored lines: an unpriced line per meter (amount 0, price version 0)
-- beside the charge lines, each with its dimensions.
ALTER TABLE invoice_line
    ADD COLUMN dimensions_key text COLLATE "C" NOT NULL DEFAULT '',
    DROP CONSTRAINT invoice_line_kind_check,
    ADD CONSTRAINT invoice_line_kind_check CHECK (kind IN ('charge', 'unpriced', 'adjustment', 'rounding')),
    DROP CONSTRAINT invoice_line_shape_check,
    ADD CONSTRAINT invoice_line_shape_check CHECK (CASE WHEN kind IN ('charge', 'unpriced')
        THEN origin_event_id IS NULL AND meter_code IS NOT NULL AND price_version IS NOT NULL
             AND unit_price IS NOT NULL AND quantity IS NOT NULL AND charge_count >= 1
             AND (kind = 'charge') = (price_version >= 1)
        ELSE origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL AND dimensions_key = ''
        END);
DROP INDEX invoice_line_charge_key;
CREATE UNIQUE INDEX invoice_line_charge_key ON invoice_line (invoice_id, kind, meter_code, price_version, dimensions_key)
    WHERE kind IN ('charge', 'unpriced');
