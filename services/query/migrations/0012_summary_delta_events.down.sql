-- A row standing for several events cannot be split back into one per
-- event: refuse while any is pending (fold them first), then drop the count.
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM summary_delta WHERE events > 1) THEN
        RAISE EXCEPTION 'summary_delta holds rows of several events: fold them before migrating down';
    END IF;
END $$;
ALTER TABLE summary_delta DROP COLUMN events;
