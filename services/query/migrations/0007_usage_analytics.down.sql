DROP TABLE charge_line_value;
DELETE FROM charge_line WHERE dimensions_key <> '';
ALTER TABLE charge_line DROP CONSTRAINT charge_line_pkey;
ALTER TABLE charge_line ADD PRIMARY KEY (tenant_id, period, currency, meter_code, price_version);
ALTER TABLE charge_line
    DROP COLUMN dimensions_key,
    DROP COLUMN latest_at,
    DROP COLUMN latest_source_system,
    DROP COLUMN latest_source_event_id;
DROP TABLE tenant_zone;
DROP TABLE usage_distinct_day;
DROP TABLE usage_hourly;
DROP TABLE usage_fact;
DROP TABLE meter_definition;
