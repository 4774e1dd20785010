DELETE FROM invoice_price_version WHERE price_key <> '';
ALTER TABLE invoice_price_version DROP CONSTRAINT invoice_price_version_pkey;
ALTER TABLE invoice_price_version DROP COLUMN price_key;
ALTER TABLE invoice_price_version ADD PRIMARY KEY (tenant_id, currency, meter_code, price_version);
