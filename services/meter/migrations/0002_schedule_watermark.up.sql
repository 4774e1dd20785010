-- The schedule watermark of a price series (decision 0011): the series is
-- published through known_through, every version taking effect at or before
-- it has been activated, so an activation must take effect after it. NULL:
-- nothing published yet (a series activated before this migration).
ALTER TABLE price_series ADD COLUMN known_through timestamptz;

-- Series whose watermark runs out soonest first: the publisher's scan.
CREATE INDEX price_series_known_through ON price_series (known_through);

-- Pricing models (DESIGN.md section 3): unit (unit_price), graduated and
-- volume (tiers: [{upTo, unitPrice, flatFee}], the last without upTo),
-- package (package_size units for package_price). Only the model's own
-- fields are set; package pricing (pkg/pricing) validates them before they
-- are written. Versions already written are unit.
ALTER TABLE price ADD COLUMN model text NOT NULL DEFAULT 'unit'
    CHECK (model IN ('unit', 'graduated', 'volume', 'package'));
ALTER TABLE price ADD COLUMN tiers jsonb;
ALTER TABLE price ADD COLUMN package_size numeric CHECK (package_size > 0);
ALTER TABLE price ADD COLUMN package_price numeric CHECK (package_price >= 0);
ALTER TABLE price ALTER COLUMN unit_price DROP NOT NULL;
ALTER TABLE price ADD CONSTRAINT price_model_fields CHECK (
    (model = 'unit') = (unit_price IS NOT NULL)
    AND (model IN ('graduated', 'volume')) = (tiers IS NOT NULL)
    AND (model = 'package') = (package_size IS NOT NULL AND package_price IS NOT NULL));
