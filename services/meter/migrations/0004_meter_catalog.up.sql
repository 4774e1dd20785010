-- The meter catalog (DESIGN.md section 3a): one row per meter, defined once
-- for the installation by a catalog-admin (POST /v1/meters) or implied by
-- the first price activated for a code not in the catalog (a sum meter
-- without dimensions, implied = true). A meter never changes once defined.
-- event_id is the MeterDefined event that announced it; NULL for a meter
-- this migration implied, until the app publishes it (app.PublishPendingMeters,
-- run by the service's background loop).
CREATE TABLE meter (
    code           text        PRIMARY KEY CHECK (code ~ '^[A-Za-z0-9_.-]{1,64}$'),
    name           text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    aggregation    text        NOT NULL CHECK (aggregation IN ('sum', 'count', 'max', 'latest', 'unique_count')),
    value_property text        CHECK (value_property ~ '^[A-Za-z0-9_.-]{1,64}$'),
    dimensions     text[]      NOT NULL DEFAULT '{}' CHECK (cardinality(dimensions) <= 5),
    event_type     text        NOT NULL CONSTRAINT meter_event_type_key UNIQUE
                               CHECK (char_length(event_type) BETWEEN 1 AND 200),
    implied        boolean     NOT NULL DEFAULT false,
    defined_at     timestamptz NOT NULL,
    actor          text        CHECK (char_length(actor) BETWEEN 1 AND 256),
    event_id       uuid        CONSTRAINT meter_event_id_key UNIQUE,
    CONSTRAINT meter_implied_sum CHECK (NOT implied OR (aggregation = 'sum' AND cardinality(dimensions) = 0
                                                         AND value_property IS NULL))
);

-- The meters whose MeterDefined is still to be published.
CREATE INDEX meter_unpublished ON meter (code) WHERE event_id IS NULL;

-- A definition is never edited or deleted; the one change allowed is
-- recording the event that publishes a meter defined without one.
CREATE FUNCTION meter_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.event_id IS NULL AND NEW.event_id IS NOT NULL
       AND ROW(NEW.code, NEW.name, NEW.aggregation, NEW.value_property, NEW.dimensions, NEW.event_type,
               NEW.implied, NEW.defined_at, NEW.actor)
           IS NOT DISTINCT FROM
           ROW(OLD.code, OLD.name, OLD.aggregation, OLD.value_property, OLD.dimensions, OLD.event_type,
               OLD.implied, OLD.defined_at, OLD.actor) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'meter definitions are immutable' USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER meter_immutable BEFORE UPDATE OR DELETE ON meter
    FOR EACH ROW EXECUTE FUNCTION meter_immutable();

-- The meters today's prices imply: a sum meter without dimensions per meter
-- code priced so far, named and fed (eventType) by its code. The table is
-- empty here, so no two of them can share an eventType. They are defined
-- unpublished (event_id NULL): the app publishes their MeterDefined.
INSERT INTO meter (code, name, aggregation, event_type, implied, defined_at)
SELECT DISTINCT meter_code, meter_code, 'sum', meter_code, true, now()
FROM price;

-- Dimension prices (section 3a): the {name: value} a price version applies
-- to, among its catalog meter's dimensions; {} for the series' default.
-- Versions already written have none.
ALTER TABLE price ADD COLUMN dimensions jsonb NOT NULL DEFAULT '{}'
    CONSTRAINT price_dimensions_object CHECK (jsonb_typeof(dimensions) = 'object');
