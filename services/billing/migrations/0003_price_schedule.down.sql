ALTER TABLE charge DROP CONSTRAINT IF EXISTS charge_amount_under_unit_only;
ALTER TABLE charge DROP COLUMN IF EXISTS model;
ALTER TABLE price_evidence DROP COLUMN IF EXISTS package_price;
ALTER TABLE price_evidence DROP COLUMN IF EXISTS package_size;
ALTER TABLE price_evidence DROP COLUMN IF EXISTS tiers;
ALTER TABLE price_evidence DROP COLUMN IF EXISTS model;
DROP TABLE IF EXISTS price_schedule;
