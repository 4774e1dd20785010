ALTER TABLE usage_fact DROP CONSTRAINT usage_fact_legacy_bound;
DROP TABLE usage_fact_months;
DROP FUNCTION usage_uuid7_floor(timestamptz);
DROP TRIGGER usage_fact_record_source ON usage_fact;
DROP FUNCTION usage_fact_record_source();
DROP TABLE usage_fact_source;
