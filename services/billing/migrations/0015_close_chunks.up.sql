-- Step 2 of a close tallies the period's charges in chunks of
-- BILLING_CLOSE_CHUNK charges, each its own transaction under the period's
-- exclusive lock (decision 0014, "The close works in bounded chunks"), so
-- no statement's time grows with the period. Once step 1 has marked the
-- period closing its charges are final (no rating adds to it, charges are
-- immutable), so a keyset walk over usage_event_id sees each exactly once.
--
-- close_progress is the walk's position: the last usage_event_id tallied
-- and the chunks so far, written in the chunk's transaction with its sums,
-- so a retry after a crash carries on where the last commit left it. Kept
-- after the close until close_value is purged.
CREATE TABLE close_progress (
    tenant_id text        NOT NULL,
    period    text        NOT NULL,
    after     uuid,
    chunks    bigint      NOT NULL DEFAULT 0,
    charges   bigint      NOT NULL DEFAULT 0,
    done      boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, period)
);

-- close_line is the running tally of a closing period's lines (what
-- PeriodLines groups): count, sums, peak, the latest charge by occurrence
-- (ties to the larger source system, then source event id, in byte order),
-- the distinct values counted so far and the digest term sum of the
-- charges' event ids. O(lines) rows; the close reads them instead of the
-- charges.
CREATE TABLE close_line (
    tenant_id          text        NOT NULL,
    period             text        NOT NULL,
    meter_code         text        NOT NULL,
    currency           text        NOT NULL,
    plan_code          text        NOT NULL,
    price_version      bigint      NOT NULL,
    dimensions_key     text        NOT NULL,
    unpriced           boolean     NOT NULL,
    aggregation        text        NOT NULL,
    dimensions         text        NOT NULL,
    charges            bigint      NOT NULL,
    total              numeric     NOT NULL,
    peak               numeric     NOT NULL,
    amount             numeric     NOT NULL,
    digest             numeric     NOT NULL,
    distinct_values    bigint      NOT NULL,
    latest_at          timestamptz,
    latest_system      text,
    latest_source      text,
    latest_quantity    numeric,
    PRIMARY KEY (tenant_id, period, meter_code, currency, plan_code, price_version, dimensions_key, unpriced, aggregation)
);

-- close_value holds the distinct values of a closing period's unique_count
-- lines seen so far: a chunk inserts its values and adds the ones new to the
-- set to its line's distinct_values. Purged in chunks after the close.
CREATE TABLE close_value (
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
