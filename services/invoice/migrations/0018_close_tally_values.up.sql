-- The distinct values of a close's unique_count lines, counted in chunks
-- like its charges (decision 0014): after the charges, the walk reads the
-- period's invoice_line_value rows in key order, a chunk per transaction,
-- adding each line's count to close_tally_line.distinct_values and
-- recording the last key it read, so no statement counts a line's values
-- at once.
ALTER TABLE close_tally
    ADD COLUMN values_done          boolean NOT NULL DEFAULT false,
    ADD COLUMN value_currency       text    NOT NULL DEFAULT '',
    ADD COLUMN value_meter_code     text    NOT NULL DEFAULT '',
    ADD COLUMN value_price_version  bigint  NOT NULL DEFAULT 0,
    ADD COLUMN value_dimensions_key text    COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN value_unpriced       boolean NOT NULL DEFAULT false,
    ADD COLUMN value_value          text    COLLATE "C" NOT NULL DEFAULT '';

ALTER TABLE close_tally_line ADD COLUMN distinct_values bigint NOT NULL DEFAULT 0;
