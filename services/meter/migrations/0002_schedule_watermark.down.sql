-- Versions of other models than unit cannot be kept by 0001's schema: the
-- down migration refuses to run over them (NOT NULL fails).
ALTER TABLE price DROP CONSTRAINT IF EXISTS price_model_fields;
ALTER TABLE price ALTER COLUMN unit_price SET NOT NULL;
ALTER TABLE price DROP COLUMN IF EXISTS package_price;
ALTER TABLE price DROP COLUMN IF EXISTS package_size;
ALTER TABLE price DROP COLUMN IF EXISTS tiers;
ALTER TABLE price DROP COLUMN IF EXISTS model;
DROP INDEX IF EXISTS price_series_known_through;
ALTER TABLE price_series DROP COLUMN IF EXISTS known_through;
