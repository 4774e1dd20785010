-- The schedule watermark of a price series (decision 0011): the series is
-- published through known_through, every version taking effect at or before
-- it has been activated, so an activation must take effect after it. NULL:
-- nothing published yet (a series activated before this migration).
ALTER TABLE price_series ADD COLUMN known_through timestamptz;

-- Series whose watermark runs out soonest first: the publisher's scan.
CREATE INDEX price_series_known_through ON price_series (known_through);
