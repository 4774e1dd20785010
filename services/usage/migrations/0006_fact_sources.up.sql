-- Facts by month, step 1 of 3 (decision 0025): the source identity of every
-- fact moves to a table of its own, not partitioned, because a unique
-- constraint of a table partitioned by month can only hold within a month,
-- while a source identity must name one fact forever. usage_id is the fact
-- the identity names; event_id (its UsageAccepted) stays unique here.
CREATE TABLE usage_fact_source (
    tenant_id       text NOT NULL,
    source_system   text NOT NULL,
    source_event_id text NOT NULL,
    usage_id        uuid NOT NULL,
    event_id        uuid NOT NULL CONSTRAINT usage_fact_source_event_id_key UNIQUE,
    PRIMARY KEY (tenant_id, source_system, source_event_id)
);

-- Until usage_fact is partitioned (step 3), a fact inserted by the statement
-- of today also records its identity, so the copy of step 2 misses none.
CREATE FUNCTION usage_fact_record_source() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_fact_source (tenant_id, source_system, source_event_id, usage_id, event_id)
    VALUES (NEW.tenant_id, NEW.source_system, NEW.source_event_id, NEW.usage_id, NEW.event_id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER usage_fact_record_source AFTER INSERT ON usage_fact
    FOR EACH ROW EXECUTE FUNCTION usage_fact_record_source();

-- The month partitions' bounds are UUIDv7 values: the first UUIDv7 of an
-- instant (its 48-bit Unix milliseconds, the rest zero). usage_id is a
-- UUIDv7 made when the fact is accepted, so a fact's partition is the
-- month (UTC) it was accepted in.
CREATE FUNCTION usage_uuid7_floor(t timestamptz) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

-- Where today's table ends once it is the first partition: the start of a
-- month. An empty table (a new database) ends at the current month, which
-- the first month partition then holds; a table with facts takes the rest
-- of this month, and the next month too when this one ends within a week,
-- so no fact accepted while steps 2 and 3 run falls past it.
CREATE TABLE usage_fact_months (
    one          boolean     PRIMARY KEY DEFAULT true CHECK (one),
    legacy_until timestamptz NOT NULL
);
INSERT INTO usage_fact_months (legacy_until)
SELECT CASE WHEN EXISTS (SELECT 1 FROM usage_fact)
            THEN date_trunc('month', (now() + interval '7 days') AT TIME ZONE 'UTC') + interval '1 month'
            ELSE date_trunc('month', now() AT TIME ZONE 'UTC')
       END AT TIME ZONE 'UTC';

-- The check that proves today's rows fit below that bound: added NOT VALID
-- (no scan under this step's lock), validated in step 2 under a lock that
-- lets facts be inserted, so step 3's ATTACH does not scan.
DO $$
BEGIN
    EXECUTE format('ALTER TABLE usage_fact ADD CONSTRAINT usage_fact_legacy_bound '
                   'CHECK (usage_id IS NOT NULL AND usage_id < %L::uuid) NOT VALID',
                   usage_uuid7_floor((SELECT legacy_until FROM usage_fact_months)));
END $$;
