-- Back to one table: the rows of every attached partition go to the first
-- one, which becomes usage_fact again (archived partitions are not read).
DROP FUNCTION usage_fact_archive(timestamptz);
DROP FUNCTION usage_fact_add_months(integer);
DROP FUNCTION usage_fact_add_month(timestamptz);
ALTER TABLE usage_fact DETACH PARTITION usage_fact_legacy;
ALTER TABLE usage_fact_legacy DROP CONSTRAINT usage_fact_legacy_bound;
INSERT INTO usage_fact_legacy SELECT * FROM usage_fact;
DROP TABLE usage_fact;
ALTER TABLE usage_fact_legacy RENAME TO usage_fact;
ALTER TABLE usage_fact RENAME CONSTRAINT usage_fact_legacy_pkey TO usage_fact_pkey;
ALTER TABLE usage_fact RENAME CONSTRAINT usage_fact_legacy_event_id_key TO usage_fact_event_id_key;
ALTER TABLE usage_fact RENAME CONSTRAINT usage_fact_legacy_source_key TO usage_fact_source_key;
ALTER INDEX usage_fact_legacy_reconciliation_idx RENAME TO usage_fact_reconciliation_idx;
ALTER TABLE usage_fact ADD CONSTRAINT usage_fact_legacy_bound CHECK (usage_id IS NOT NULL) NOT VALID;
CREATE TRIGGER usage_fact_record_source AFTER INSERT ON usage_fact
    FOR EACH ROW EXECUTE FUNCTION usage_fact_record_source();
