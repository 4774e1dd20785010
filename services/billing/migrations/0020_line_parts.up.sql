-- What each batch of charges added to each line of a period: one row per
-- (batch, line), written by the statement that rates the charges
-- (RateUsages), insert-only, so concurrent batches share no row, and folded
-- into one row, their sum, once a line has more than BILLING_PARTS_FOLD_AT
-- of them (FoldParts, in the batch's transaction). A period's read (the
-- estimate) and a credit's check sum these, a few rows a line, instead of
-- walking the period's charges, one a fact: what they cost grows with the
-- period's lines, not its facts. The columns are those of close_line but
-- the digest (a close's proof, computed by the close from the charges):
-- count, sums, peak, own amounts, the values new to the line's set
-- (charge_line_value) and the latest charge by occurrence, ties to the
-- larger source system, then source event id, in byte order.
CREATE TABLE charge_line_part (
    part_id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       text        NOT NULL,
    period          text        NOT NULL,
    meter_code      text        NOT NULL,
    currency        text        NOT NULL,
    plan_code       text        NOT NULL,
    price_version   bigint      NOT NULL,
    dimensions_key  text        NOT NULL,
    unpriced        boolean     NOT NULL,
    aggregation     text        NOT NULL,
    dimensions      text        NOT NULL,
    charges         bigint      NOT NULL CHECK (charges >= 1),
    total           numeric     NOT NULL,
    peak            numeric     NOT NULL,
    amount          numeric     NOT NULL,
    new_values      bigint      NOT NULL CHECK (new_values >= 0),
    has_latest      boolean     NOT NULL,
    latest_at       timestamptz NOT NULL,
    latest_system   text        NOT NULL,
    latest_source   text        NOT NULL,
    latest_quantity numeric     NOT NULL
);
CREATE INDEX charge_line_part_period ON charge_line_part (tenant_id, period);

-- The distinct values of the unique_count lines of periods not closed: a
-- batch inserts its values and counts the ones new to the set into its
-- part's new_values. Purged in chunks after the close, like close_value.
CREATE TABLE charge_line_value (
    tenant_id      text    NOT NULL,
    period         text    NOT NULL,
    meter_code     text    NOT NULL,
    currency       text    NOT NULL,
    plan_code      text    NOT NULL,
    price_version  bigint  NOT NULL,
    dimensions_key text    NOT NULL,
    unpriced       boolean NOT NULL,
    value          text    NOT NULL,
    PRIMARY KEY (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key, unpriced, value)
);

-- The charges already rated: one part a line, and the value sets of the
-- periods not closed.
INSERT INTO charge_line_value (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key,
                               unpriced, value)
SELECT DISTINCT c.tenant_id, c.period, c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key,
       c.unpriced, c.value
FROM charge c
WHERE c.aggregation = 'unique_count'
  AND NOT EXISTS (SELECT 1 FROM billing_period b WHERE b.tenant_id = c.tenant_id AND b.period = c.period
                                                 AND b.status = 'closed');

INSERT INTO charge_line_part (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key,
                              unpriced, aggregation, dimensions, charges, total, peak, amount, new_values,
                              has_latest, latest_at, latest_system, latest_source, latest_quantity)
SELECT c.tenant_id, c.period, c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key, c.unpriced,
       c.aggregation, min(c.dimensions::text), count(*), sum(c.quantity), max(c.quantity), sum(c.amount),
       count(DISTINCT c.value) FILTER (WHERE c.aggregation = 'unique_count'),
       c.aggregation = 'latest',
       coalesce((array_agg(c.occurred_at ORDER BY c.occurred_at DESC, c.source_system COLLATE "C" DESC,
                           c.source_event_id COLLATE "C" DESC) FILTER (WHERE c.aggregation = 'latest'))[1], 'epoch'),
       coalesce((array_agg(c.source_system ORDER BY c.occurred_at DESC, c.source_system COLLATE "C" DESC,
                           c.source_event_id COLLATE "C" DESC) FILTER (WHERE c.aggregation = 'latest'))[1], ''),
       coalesce((array_agg(c.source_event_id ORDER BY c.occurred_at DESC, c.source_system COLLATE "C" DESC,
                           c.source_event_id COLLATE "C" DESC) FILTER (WHERE c.aggregation = 'latest'))[1], ''),
       coalesce((array_agg(c.quantity ORDER BY c.occurred_at DESC, c.source_system COLLATE "C" DESC,
                           c.source_event_id COLLATE "C" DESC) FILTER (WHERE c.aggregation = 'latest'))[1], 0)
FROM charge c
GROUP BY c.tenant_id, c.period, c.meter_code, c.currency, c.plan_code, c.price_version, c.dimensions_key,
         c.unpriced, c.aggregation;
