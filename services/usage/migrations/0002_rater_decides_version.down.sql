-- Facts accepted without a version make the old constraint impossible;
-- they get 0 (unknown) only to let the column be NOT NULL again.
ALTER TABLE usage_fact DROP CONSTRAINT IF EXISTS usage_fact_price_version_check;
UPDATE usage_fact SET price_version = 0 WHERE price_version IS NULL;
ALTER TABLE usage_fact ALTER COLUMN price_version SET NOT NULL;
