DROP INDEX IF EXISTS price_series_known_through;
ALTER TABLE price_series DROP COLUMN IF EXISTS known_through;
