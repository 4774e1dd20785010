-- A close's tally of its period's charges, built in chunks that each commit
-- on their own (decision 0014): the position the walk reached (keyset order
-- of usage_event_id and origin_event_id) and whether it is done, and the
-- running sums of each line. A restart or a redelivery of the close resumes
-- at the position; the close's last transaction reads the lines, a few rows
-- per period, instead of the charges.
CREATE TABLE close_tally (
    tenant_id     text    NOT NULL,
    period        text    NOT NULL,
    after_usage   uuid    NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    after_origin  uuid    NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    chunks        bigint  NOT NULL DEFAULT 0,
    done          boolean NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, period)
);

CREATE TABLE close_tally_line (
    tenant_id      text    NOT NULL,
    period         text    NOT NULL,
    currency       text    NOT NULL,
    meter_code     text    NOT NULL,
    price_version  bigint  NOT NULL,
    dimensions_key text    COLLATE "C" NOT NULL,
    unpriced       boolean NOT NULL,
    aggregation    text    NOT NULL,
    unit_price     numeric NOT NULL,
    charges        bigint  NOT NULL,
    quantity       numeric NOT NULL,
    amount         numeric NOT NULL,
    -- the sum of the charges' digest terms (pkg/digest), an exact integer
    digest         numeric NOT NULL,
    PRIMARY KEY (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced, aggregation, unit_price)
);
