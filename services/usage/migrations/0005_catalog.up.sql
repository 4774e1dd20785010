-- The meter catalog replicated from the meter's MeterDefined events
-- (section 3a): what each meter counts and which CloudEvents type feeds
-- it. A meter never changes once defined, so a row is never updated.
-- event_id is the MeterDefined that defined it.
CREATE TABLE meters (
    code           text        PRIMARY KEY,
    aggregation    text        NOT NULL,
    value_property text        NOT NULL DEFAULT '',
    dimensions     text[]      NOT NULL DEFAULT '{}',
    event_type     text        NOT NULL CONSTRAINT meters_event_type_key UNIQUE,
    event_id       uuid        NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT now()
);

-- A fact's properties (section 3a: at most 16 string values), kept with
-- it and compared on a replay. Facts from before have none.
ALTER TABLE usage_fact ADD COLUMN properties jsonb NOT NULL DEFAULT '{}';
