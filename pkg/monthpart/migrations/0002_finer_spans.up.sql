-- Partitions finer than a month (pkg/monthpart's Span): a partition's
-- suffix is YYYYMM for a month or YYYYMMDD for the day it starts on (a day,
-- a week, or the rest of a week after a month kept from before). The body is
-- 0001's but for the suffix it accepts.
CREATE OR REPLACE FUNCTION monthpart_ddl(parent text, key text, op text, month text,
                              lo uuid DEFAULT NULL, hi uuid DEFAULT NULL, slot text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    part text := parent || '_p' || month;
    def  text := parent || '_default';
    chk  text := parent || '_p' || month || '_not_in_default';
BEGIN
    IF month !~ '^[0-9]{6}([0-9]{2})?$' THEN
        RAISE EXCEPTION 'partition % is not YYYYMM or YYYYMMDD', month;
    END IF;
    CASE op
    WHEN 'add_check' THEN
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I', def, chk);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I < %L OR %I >= %L) NOT VALID',
                       def, chk, key, lo, key, hi);
    WHEN 'validate_check' THEN
        EXECUTE format('ALTER TABLE %I VALIDATE CONSTRAINT %I', def, chk);
    WHEN 'drop_check' THEN
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I', def, chk);
    WHEN 'create' THEN
        IF slot IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           part, parent, lo, hi);
        ELSE
            EXECUTE format('CREATE TABLE %I PARTITION OF %I (CONSTRAINT %I UNIQUE (%s)) FOR VALUES FROM (%L) TO (%L)',
                           part, parent, part || '_slot', slot, lo, hi);
        END IF;
    WHEN 'detach' THEN
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', parent, part);
    WHEN 'drop' THEN
        IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(part)) THEN
            RAISE EXCEPTION '% is still a partition: detach it first', part;
        END IF;
        EXECUTE format('DROP TABLE %I', part);
    ELSE
        RAISE EXCEPTION 'unknown operation %', op;
    END CASE;
END $$;
REVOKE EXECUTE ON FUNCTION monthpart_ddl(text, text, text, text, uuid, uuid, text) FROM PUBLIC;
