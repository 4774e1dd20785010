ALTER TABLE price_series ADD COLUMN IF NOT EXISTS known_through timestamptz;
UPDATE price_series SET known_through = (SELECT max(known_through) FROM schedule_shard);
CREATE INDEX IF NOT EXISTS price_series_known_through ON price_series (known_through);
ALTER TABLE price DROP COLUMN IF EXISTS schedule_seq;
DROP TABLE IF EXISTS schedule_shard;
