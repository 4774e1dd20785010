ALTER TABLE charge DROP CONSTRAINT charge_legacy_bound;
DROP TABLE charge_months;
DROP FUNCTION billing_uuid7_floor(timestamptz);
DROP TRIGGER charge_record_origin ON charge;
DROP FUNCTION charge_record_origin();
DROP TABLE charge_origin;
