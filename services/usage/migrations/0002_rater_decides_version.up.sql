-- The rater decides a fact's price version (decision 0011): usage no longer
-- attaches one. Facts accepted before keep theirs; new facts have none.
ALTER TABLE usage_fact ALTER COLUMN price_version DROP NOT NULL;
