-- Back to one table: the rows of every attached partition go to the first
-- one, which becomes charge again (archived partitions are not read).
DROP FUNCTION charge_archive(timestamptz);
DROP FUNCTION charge_add_months(integer);
DROP FUNCTION charge_add_month(timestamptz);
ALTER TABLE adjustment DROP CONSTRAINT adjustment_correction_of_fkey;
ALTER TABLE charge DETACH PARTITION charge_legacy;
ALTER TABLE charge_legacy DROP CONSTRAINT charge_legacy_bound;
INSERT INTO charge_legacy SELECT * FROM charge;
DROP TABLE charge;
ALTER TABLE charge_legacy RENAME TO charge;
ALTER TABLE charge RENAME CONSTRAINT charge_legacy_pkey TO charge_pkey;
ALTER TABLE charge_origin RENAME CONSTRAINT charge_usage_id_key TO charge_origin_usage_id_key;
ALTER TABLE charge_origin RENAME CONSTRAINT charge_usage_event_id_key TO charge_origin_usage_event_id_key;
ALTER TABLE charge_origin RENAME CONSTRAINT charge_event_id_key TO charge_origin_event_id_key;
ALTER TABLE charge RENAME CONSTRAINT charge_legacy_event_id_key TO charge_event_id_key;
ALTER TABLE charge RENAME CONSTRAINT charge_legacy_usage_event_id_key TO charge_usage_event_id_key;
ALTER TABLE charge RENAME CONSTRAINT charge_legacy_usage_id_key TO charge_usage_id_key;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.relname AS name
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid = 'charge'::regclass AND c.relname LIKE 'legacy\_%' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.name, substr(r.name, 8));
    END LOOP;
END $$;
ALTER TABLE adjustment ADD CONSTRAINT adjustment_correction_of_fkey
    FOREIGN KEY (correction_of) REFERENCES charge (charge_id);
CREATE TRIGGER charge_immutable BEFORE UPDATE OR DELETE ON charge
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();
ALTER TABLE charge ADD CONSTRAINT charge_legacy_bound CHECK (charge_id IS NOT NULL) NOT VALID;
CREATE TRIGGER charge_record_origin AFTER INSERT ON charge
    FOR EACH ROW EXECUTE FUNCTION charge_record_origin();
