ALTER TABLE tenant_settings DROP COLUMN tax_rates;
