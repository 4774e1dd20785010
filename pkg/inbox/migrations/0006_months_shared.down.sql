-- The function keeps its shared body: it does what 0005's did, and 0005's
-- down drops it.
SELECT 1;
