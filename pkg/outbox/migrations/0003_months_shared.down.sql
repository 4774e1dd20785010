-- The function keeps its shared body: it does what 0002's did, and 0002's
-- down drops it.
SELECT 1;
