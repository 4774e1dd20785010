-- Dimension prices cannot be kept by 0003's schema: the down migration
-- refuses to run over them rather than turn them into default prices.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM price WHERE dimensions <> '{}') THEN
        RAISE EXCEPTION 'dimension prices exist: they cannot be migrated down';
    END IF;
END
$$;
ALTER TABLE price DROP COLUMN IF EXISTS dimensions;
DROP TABLE IF EXISTS meter;
DROP FUNCTION IF EXISTS meter_immutable();
