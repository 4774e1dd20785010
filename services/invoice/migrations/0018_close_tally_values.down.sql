ALTER TABLE close_tally_line DROP COLUMN distinct_values;
ALTER TABLE close_tally
    DROP COLUMN values_done, DROP COLUMN value_currency, DROP COLUMN value_meter_code,
    DROP COLUMN value_price_version, DROP COLUMN value_dimensions_key, DROP COLUMN value_unpriced,
    DROP COLUMN value_value;
