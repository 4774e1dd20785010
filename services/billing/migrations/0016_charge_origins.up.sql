-- Charges by month, step 1 of 3 (decision 0025): what makes a charge one
-- of its fact moves to a table of its own, not partitioned, because a
-- unique constraint of a table partitioned by month only holds within a
-- month, while a fact must be charged once forever: the fact (tenant_id,
-- usage_id), its UsageAccepted (usage_event_id) and the ChargeRated
-- (event_id) are unique here. Step 3 gives these constraints the names
-- the charge's had (the inbox reads charge_usage_event_id_key).
CREATE TABLE charge_origin (
    tenant_id      text NOT NULL,
    usage_id       uuid NOT NULL,
    usage_event_id uuid NOT NULL CONSTRAINT charge_origin_usage_event_id_key PRIMARY KEY,
    event_id       uuid NOT NULL CONSTRAINT charge_origin_event_id_key UNIQUE,
    charge_id      uuid NOT NULL
);
-- Made after the others, as on charge: a redelivered UsageAccepted is a
-- violation of charge_usage_event_id_key first, which the inbox absorbs as
-- a duplicate (billing.Spec's OriginConstraints).
ALTER TABLE charge_origin ADD CONSTRAINT charge_origin_usage_id_key UNIQUE (tenant_id, usage_id);

-- Until charge is partitioned (step 3), a charge inserted by the statement
-- of today also records its origin, so the copy of step 2 misses none.
CREATE FUNCTION charge_record_origin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO charge_origin (tenant_id, usage_id, usage_event_id, event_id, charge_id)
    VALUES (NEW.tenant_id, NEW.usage_id, NEW.usage_event_id, NEW.event_id, NEW.charge_id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER charge_record_origin AFTER INSERT ON charge
    FOR EACH ROW EXECUTE FUNCTION charge_record_origin();

-- The first UUIDv7 of an instant: the month partitions' bounds. charge_id
-- is a UUIDv7 made when the fact is rated, so a charge's partition is the
-- month (UTC) it was rated in.
CREATE FUNCTION billing_uuid7_floor(t timestamptz) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

-- Where today's table ends once it is the first partition: the start of
-- next month (two months ahead when this one ends within a week) for a
-- table with charges, this month for an empty one.
CREATE TABLE charge_months (
    one          boolean     PRIMARY KEY DEFAULT true CHECK (one),
    legacy_until timestamptz NOT NULL
);
INSERT INTO charge_months (legacy_until)
SELECT CASE WHEN EXISTS (SELECT 1 FROM charge)
            THEN date_trunc('month', (now() + interval '7 days') AT TIME ZONE 'UTC') + interval '1 month'
            ELSE date_trunc('month', now() AT TIME ZONE 'UTC')
       END AT TIME ZONE 'UTC';

-- Proves today's rows fit below that bound: NOT VALID here (no scan),
-- validated in step 2, so step 3's ATTACH does not scan.
DO $$
BEGIN
    EXECUTE format('ALTER TABLE charge ADD CONSTRAINT charge_legacy_bound '
                   'CHECK (charge_id IS NOT NULL AND charge_id < %L::uuid) NOT VALID',
                   billing_uuid7_floor((SELECT legacy_until FROM charge_months)));
END $$;
