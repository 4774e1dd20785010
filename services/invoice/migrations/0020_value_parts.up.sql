-- The distinct values the alerts count, maintained as charges are recorded
-- instead of counted from the value sets at each decision: a usage alert on
-- a unique_count meter, and a spend alert on a currency with unique_count
-- lines, counted every value of the period's set in the charges' inbox
-- transaction, so each batch of charges cost what the period's distinct
-- values number. AddCharges now writes, per batch, how many values it added
-- to each line's set (invoice_line_value_part) and to each meter's set
-- across its lines (invoice_meter_value, invoice_meter_value_part), insert
-- only like invoice_line_part: deciding an alert sums a few rows per batch.
CREATE TABLE invoice_line_value_part (
    part_id        bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id      text    NOT NULL,
    period         text    NOT NULL,
    currency       text    NOT NULL,
    meter_code     text    NOT NULL,
    price_version  bigint  NOT NULL,
    dimensions_key text    COLLATE "C" NOT NULL,
    unpriced       boolean NOT NULL,
    new_values     bigint  NOT NULL CHECK (new_values >= 1)
);
CREATE INDEX invoice_line_value_part_period ON invoice_line_value_part (tenant_id, period, currency, meter_code);

-- A meter's distinct values in a period, across its lines (currencies,
-- price versions, dimensions): what a usage alert on the meter counts.
CREATE TABLE invoice_meter_value (
    tenant_id  text NOT NULL,
    period     text NOT NULL,
    meter_code text NOT NULL,
    value      text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, period, meter_code, value)
);

CREATE TABLE invoice_meter_value_part (
    part_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text   NOT NULL,
    period     text   NOT NULL,
    meter_code text   NOT NULL,
    new_values bigint NOT NULL CHECK (new_values >= 1)
);
CREATE INDEX invoice_meter_value_part_period ON invoice_meter_value_part (tenant_id, period, meter_code);

-- The values already recorded in periods not closed.
INSERT INTO invoice_line_value_part (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced,
                                     new_values)
SELECT v.tenant_id, v.period, v.currency, v.meter_code, v.price_version, v.dimensions_key, v.unpriced, count(*)
FROM invoice_line_value v
WHERE NOT EXISTS (SELECT 1 FROM period_close pc WHERE pc.tenant_id = v.tenant_id AND pc.period = v.period)
GROUP BY v.tenant_id, v.period, v.currency, v.meter_code, v.price_version, v.dimensions_key, v.unpriced;

INSERT INTO invoice_meter_value (tenant_id, period, meter_code, value)
SELECT DISTINCT v.tenant_id, v.period, v.meter_code, v.value
FROM invoice_line_value v
WHERE NOT EXISTS (SELECT 1 FROM period_close pc WHERE pc.tenant_id = v.tenant_id AND pc.period = v.period);

INSERT INTO invoice_meter_value_part (tenant_id, period, meter_code, new_values)
SELECT m.tenant_id, m.period, m.meter_code, count(*)
FROM invoice_meter_value m
GROUP BY m.tenant_id, m.period, m.meter_code;
