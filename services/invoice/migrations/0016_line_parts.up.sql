-- What each batch of charges added to each line of a period not closed:
-- one row per (batch, line), written by the statement that records the
-- charges (AddCharges), insert-only, so concurrent batches share no row.
-- The running figures the alerts watch are summed from these rows, a few
-- per batch, instead of from the charges, one per fact: deciding an alert
-- costs what the period's batches number, not its facts.
CREATE TABLE invoice_line_part (
    part_id        bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id      text    NOT NULL,
    period         text    NOT NULL,
    currency       text    NOT NULL,
    meter_code     text    NOT NULL,
    price_version  bigint  NOT NULL,
    dimensions_key text    COLLATE "C" NOT NULL,
    unpriced       boolean NOT NULL,
    aggregation    text    NOT NULL,
    unit_price     numeric NOT NULL,
    quantity       numeric NOT NULL,
    charges        bigint  NOT NULL CHECK (charges >= 1),
    amount         numeric NOT NULL
);
CREATE INDEX invoice_line_part_period ON invoice_line_part (tenant_id, period, currency, meter_code);

-- The charges already recorded in periods not closed, one row per line.
INSERT INTO invoice_line_part (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced,
                               aggregation, unit_price, quantity, charges, amount)
SELECT c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced,
       c.aggregation, c.unit_price, sum(c.quantity), count(*), sum(c.amount)
FROM invoice_charge c
WHERE NOT EXISTS (SELECT 1 FROM period_close pc WHERE pc.tenant_id = c.tenant_id AND pc.period = c.period)
GROUP BY c.tenant_id, c.period, c.currency, c.meter_code, c.price_version, c.dimensions_key, c.unpriced,
         c.aggregation, c.unit_price;
