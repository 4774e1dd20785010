-- A plan's charges share their plan version's number and collide with the
-- tenant's own versions of that number (decision 0021): the pricing of a
-- plan's charge is recorded under its line key (domain.LineKey, holding
-- "@plan=<code>" and its dimensions), the tenant's own version's under ''
-- as before (one pricing per version whatever its dimensions).
ALTER TABLE invoice_price_version ADD COLUMN price_key text NOT NULL DEFAULT '';
ALTER TABLE invoice_price_version DROP CONSTRAINT invoice_price_version_pkey;
ALTER TABLE invoice_price_version ADD PRIMARY KEY (tenant_id, currency, meter_code, price_version, price_key);
