-- The DDL of the month upkeep of every table partitioned by month of its
-- UUIDv7 key (pkg/monthpart): one body for all of them. Each table's
-- migration defines <table>_months(op, month, lo, hi), SECURITY DEFINER, as
-- one call of this function with the table's name, key and per-month unique
-- columns fixed, so a caller chooses only the operation and the month. This
-- function itself is not SECURITY DEFINER: called directly it runs with the
-- caller's rights, and the runtime role, which owns no table, can do
-- nothing with it.
--
-- op: "create" (the month's partition, with a per-month unique constraint
-- <part>_slot on slot's columns when slot is given), "detach", "drop" (a
-- detached month only), and "add_check", "validate_check", "drop_check" (the
-- default partition's CHECK excluding the month, which spares the creation
-- its scan of the default). month is YYYYMM; lo and hi the month's first
-- UUIDv7 and the next month's.
CREATE FUNCTION monthpart_ddl(parent text, key text, op text, month text,
                              lo uuid DEFAULT NULL, hi uuid DEFAULT NULL, slot text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    part text := parent || '_p' || month;
    def  text := parent || '_default';
    chk  text := parent || '_p' || month || '_not_in_default';
BEGIN
    IF month !~ '^[0-9]{6}$' THEN
        RAISE EXCEPTION 'month % is not YYYYMM', month;
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
