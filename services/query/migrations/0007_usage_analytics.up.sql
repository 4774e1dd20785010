-- Usage analytics (DESIGN.md section 3a) and aggregated charge
-- lines.
--
-- meter_definition: the catalog, replicated from MeterDefined (a meter never
-- changes once defined: the first definition stays).
CREATE TABLE meter_definition (
    code           text        PRIMARY KEY,
    aggregation    text        NOT NULL,
    value_property text        NOT NULL DEFAULT '',
    dimensions     text[]      NOT NULL DEFAULT '{}',
    event_type     text        NOT NULL,
    defined_at     timestamptz NOT NULL
);

-- usage_fact: one row per accepted fact (UsageAccepted), unique by the
-- fact's identity, so a redelivery the inbox missed adds nothing. dims are
-- the values of the meter's dimensions in the meter's order ('' where the
-- fact has none) and value its unique_count value; both NULL (dims) while the
-- meter is not known yet: the MeterDefined that arrives later fills them in
-- and rolls the fact up. The fact level answers unique_count (exact
-- distinct counts) and time zones whose offset is not a whole hour.
CREATE TABLE usage_fact (
    tenant_id       text                NOT NULL,
    source_system   text COLLATE "C"    NOT NULL,
    source_event_id text COLLATE "C"    NOT NULL,
    meter_code      text                NOT NULL,
    occurred_at     timestamptz         NOT NULL,
    event_id        uuid                NOT NULL,
    quantity        numeric             NOT NULL CHECK (quantity >= 0),
    properties      jsonb               NOT NULL DEFAULT '{}',
    dims            text[] COLLATE "C",
    value           text COLLATE "C",
    PRIMARY KEY (tenant_id, source_system, source_event_id)
);
-- A window's facts in time order, read from the index alone.
CREATE INDEX usage_fact_window ON usage_fact (tenant_id, meter_code, occurred_at)
    INCLUDE (value, dims, quantity);
-- The facts whose meter was not known when they arrived.
CREATE INDEX usage_fact_unrolled ON usage_fact (meter_code) WHERE dims IS NULL;

-- The facts projected before: without their meter's definition yet (the
-- MeterDefined that arrives rolls them up).
INSERT INTO usage_fact (tenant_id, source_system, source_event_id, meter_code, occurred_at, event_id, quantity, properties)
SELECT tenant_id, payload->>'sourceSystem', payload->>'sourceEventId', payload->>'meterCode',
       (payload->>'occurredAt')::timestamptz, event_id, (payload->>'quantity')::numeric,
       COALESCE(payload->'properties', '{}'::jsonb)
FROM projected_event
WHERE event_type = 'UsageAccepted'
ON CONFLICT DO NOTHING;

-- usage_hourly: per tenant, meter, UTC hour and full dimension values, what
-- sum, count, max and latest need (latest's argmax with its tie-break);
-- windows of hours, days and months in any zone of whole-hour offsets are
-- unions of these rows.
CREATE TABLE usage_hourly (
    tenant_id              text                NOT NULL,
    meter_code             text                NOT NULL,
    hour                   timestamptz         NOT NULL,
    dims                   text[] COLLATE "C"  NOT NULL,
    facts                  bigint              NOT NULL CHECK (facts > 0),
    sum                    numeric             NOT NULL,
    max                    numeric             NOT NULL,
    latest_at              timestamptz         NOT NULL,
    latest_source_system   text COLLATE "C"    NOT NULL,
    latest_source_event_id text COLLATE "C"    NOT NULL,
    latest_quantity        numeric             NOT NULL,
    PRIMARY KEY (tenant_id, meter_code, hour, dims)
);

-- usage_distinct_day: per tenant, meter, UTC day and value of a
-- unique_count meter, the hours of the day (bit h for hour h, UTC) the value
-- occurred in. At most one row per fact; a day window of UTC is count(*) of
-- its rows, any window of whole UTC hours the distinct values of the rows
-- of its days whose hours meet it: exact, and as many rows as distinct
-- (day, value) pairs, not facts.
CREATE TABLE usage_distinct_day (
    tenant_id  text             NOT NULL,
    meter_code text             NOT NULL,
    day        date             NOT NULL,
    value      text COLLATE "C" NOT NULL,
    hours      integer          NOT NULL CHECK (hours > 0),
    PRIMARY KEY (tenant_id, meter_code, day, value) INCLUDE (hours)
);

-- tenant_zone: the time zone of a tenant's latest period that query saw
-- end (BillingPeriodEnded), the analytics' default zone.
CREATE TABLE tenant_zone (
    tenant_id text PRIMARY KEY,
    period    text NOT NULL,
    time_zone text NOT NULL
);

-- charge_line is now one per (tenant, period, currency, meter, price
-- version, price dimensions) and holds the line's aggregation: quantity is
-- the line's quantity under the meter's aggregation (the sum, the count, the
-- max, the latest's quantity or the number of distinct values), latest_* the
-- latest charge so far (latest's tie-break).
ALTER TABLE charge_line
    ADD COLUMN dimensions_key         text NOT NULL DEFAULT '',
    ADD COLUMN latest_at              timestamptz,
    ADD COLUMN latest_source_system   text COLLATE "C",
    ADD COLUMN latest_source_event_id text COLLATE "C";
ALTER TABLE charge_line DROP CONSTRAINT charge_line_pkey;
ALTER TABLE charge_line ADD PRIMARY KEY (tenant_id, period, currency, meter_code, price_version, dimensions_key);

-- charge_line_value: the distinct values of a unique_count line.
CREATE TABLE charge_line_value (
    tenant_id      text NOT NULL,
    period         text NOT NULL,
    currency       text NOT NULL,
    meter_code     text NOT NULL,
    price_version  bigint NOT NULL,
    dimensions_key text NOT NULL,
    value          text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, period, currency, meter_code, price_version, dimensions_key, value)
);
