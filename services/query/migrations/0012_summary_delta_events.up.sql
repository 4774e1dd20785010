-- A summary delta stands for the events of one consumed batch that share
-- its tenant, kind and key: Project inserts their sum, their count and the
-- latest occurredAt as one row, instead of a row per event that the folder
-- then deletes one by one (decision 0017, step 11). Rows written before
-- stand for one event each: the default. Adding a column with a constant
-- default rewrites no row.
ALTER TABLE summary_delta ADD COLUMN events bigint NOT NULL DEFAULT 1
    CONSTRAINT summary_delta_events_check CHECK (events > 0);
