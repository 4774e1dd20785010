-- Charges by month, step 3 of 3 (decision 0025): charge becomes a table
-- partitioned by range of charge_id, one partition per month (UTC) of
-- rating with UUIDv7 bounds, and today's table its first partition,
-- charge_legacy. Only catalog changes, but for the foreign key of
-- adjustments, validated against their few rows.
ALTER TABLE charge RENAME TO charge_legacy;
ALTER TABLE charge_legacy RENAME CONSTRAINT charge_pkey TO charge_legacy_pkey;
ALTER TABLE charge_legacy RENAME CONSTRAINT charge_event_id_key TO charge_legacy_event_id_key;
ALTER TABLE charge_legacy RENAME CONSTRAINT charge_usage_event_id_key TO charge_legacy_usage_event_id_key;
ALTER TABLE charge_legacy RENAME CONSTRAINT charge_usage_id_key TO charge_legacy_usage_id_key;
-- The guards keep their names: a fact charged twice, in any month, is a
-- violation of charge_usage_id_key or charge_usage_event_id_key as before.
ALTER TABLE charge_origin RENAME CONSTRAINT charge_origin_usage_id_key TO charge_usage_id_key;
ALTER TABLE charge_origin RENAME CONSTRAINT charge_origin_usage_event_id_key TO charge_usage_event_id_key;
ALTER TABLE charge_origin RENAME CONSTRAINT charge_origin_event_id_key TO charge_event_id_key;
-- From here on RateUsages records the origin itself.
DROP TRIGGER charge_record_origin ON charge_legacy;
-- The parent's row trigger (below) is cloned onto every partition,
-- charge_legacy included.
DROP TRIGGER charge_immutable ON charge_legacy;

-- The same columns, defaults and checks (by name), charge_id the primary
-- key; the origin's uniques live in charge_origin.
CREATE TABLE charge (LIKE charge_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (charge_id);
ALTER TABLE charge DROP CONSTRAINT charge_legacy_bound;
ALTER TABLE charge ADD CONSTRAINT charge_pkey PRIMARY KEY (charge_id);
CREATE TRIGGER charge_immutable BEFORE UPDATE OR DELETE ON charge
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();
CREATE TRIGGER charge_not_truncated BEFORE TRUNCATE ON charge
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_change();
-- Every other index of today's table, under its name, on the parent; the
-- old ones (renamed legacy_<name>) become its partitions' at ATTACH, which
-- the validated bound lets skip its scan.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid = 'charge_legacy'::regclass AND NOT i.indisunique LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.name, left('legacy_' || r.name, 63));
        EXECUTE regexp_replace(r.def, ' ON \S+ USING ', ' ON charge USING ');
    END LOOP;
    EXECUTE format('ALTER TABLE charge ATTACH PARTITION charge_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                   billing_uuid7_floor((SELECT legacy_until FROM charge_months)));
END $$;
ALTER TABLE adjustment DROP CONSTRAINT adjustment_correction_of_fkey;
ALTER TABLE adjustment ADD CONSTRAINT adjustment_correction_of_fkey
    FOREIGN KEY (correction_of) REFERENCES charge (charge_id) NOT VALID;
ALTER TABLE adjustment VALIDATE CONSTRAINT adjustment_correction_of_fkey;

-- Creates the partition of the month (UTC) holding t, with the trigger
-- refusing its truncation, unless it exists, was archived under its name,
-- or the first partition holds that month; true when it made one.
-- SECURITY DEFINER: the runtime role keeps its months ahead.
CREATE FUNCTION charge_add_month(t timestamptz) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m    timestamp := date_trunc('month', t AT TIME ZONE 'UTC');
    name text      := 'charge_' || to_char(m, 'YYYY_MM');
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('billing.charge_months', 0));
    IF (m AT TIME ZONE 'UTC') < (SELECT legacy_until FROM charge_months)
       OR to_regclass(quote_ident(name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF charge FOR VALUES FROM (%L) TO (%L)', name,
                   billing_uuid7_floor(m AT TIME ZONE 'UTC'),
                   billing_uuid7_floor((m + interval '1 month') AT TIME ZONE 'UTC'));
    EXECUTE format('CREATE TRIGGER charge_not_truncated BEFORE TRUNCATE ON %I '
                   'FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_change()', name);
    RETURN true;
END $$;

-- The partitions of this month and the ahead months after it; how many it
-- made. Billing calls it at start and every hour.
CREATE FUNCTION charge_add_months(ahead integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    made integer := 0;
BEGIN
    FOR i IN 0..ahead LOOP
        IF charge_add_month((date_trunc('month', now() AT TIME ZONE 'UTC')
                             + make_interval(months => i)) AT TIME ZONE 'UTC') THEN
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END $$;
SELECT charge_add_months(3);

-- Archives the month (UTC) holding t: detaches its partition, which stays
-- a table to dump and drop, and returns its name. Refused (55000) unless
-- the month is over and every charge in it is in a closed period (a month
-- the first partition holds archives that whole partition); a charge an
-- adjustment corrects keeps its month attached (the foreign key refuses
-- the detach). The origins stay in charge_origin: a fact of an archived
-- charge is never charged again.
CREATE FUNCTION charge_archive(t timestamptz) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m      timestamp   := date_trunc('month', t AT TIME ZONE 'UTC');
    name   text        := 'charge_' || to_char(m, 'YYYY_MM');
    ends   timestamptz := (m + interval '1 month') AT TIME ZONE 'UTC';
    legacy timestamptz := (SELECT legacy_until FROM charge_months);
    open   boolean;
BEGIN
    IF (m AT TIME ZONE 'UTC') < legacy THEN
        name := 'charge_legacy';
        ends := legacy;
    END IF;
    IF ends > now() THEN
        RAISE EXCEPTION 'partition % ends at %, not over yet', name, ends
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits
                   WHERE inhparent = 'charge'::regclass AND inhrelid = to_regclass(quote_ident(name))) THEN
        RAISE EXCEPTION 'charge has no partition %', name USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I c WHERE NOT EXISTS (
                        SELECT 1 FROM billing_period b
                        WHERE b.tenant_id = c.tenant_id AND b.period = c.period AND b.status = ''closed''))', name)
        INTO open;
    IF open THEN
        RAISE EXCEPTION 'partition % holds charges of periods not closed', name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    EXECUTE format('ALTER TABLE charge DETACH PARTITION %I', name);
    RETURN name;
END $$;
-- Archiving is the owner's (an operator's), not the runtime role's.
REVOKE EXECUTE ON FUNCTION charge_archive(timestamptz) FROM PUBLIC;
