DROP INDEX invoice_line_fee_key;
DROP INDEX invoice_line_origin_key;
CREATE UNIQUE INDEX invoice_line_origin_key ON invoice_line (origin_event_id) WHERE kind <> 'rounding';
ALTER TABLE invoice_line
    DROP CONSTRAINT invoice_line_shape_check,
    DROP CONSTRAINT invoice_line_kind_check;
-- Fee lines cannot be kept: the lines are immutable, so a database with
-- issued fee lines cannot go back below 0012.
ALTER TABLE invoice_line
    ADD CONSTRAINT invoice_line_kind_check CHECK (kind IN ('charge', 'unpriced', 'adjustment', 'rounding')),
    ADD CONSTRAINT invoice_line_shape_check CHECK (CASE WHEN kind IN ('charge', 'unpriced')
        THEN origin_event_id IS NULL AND meter_code IS NOT NULL AND price_version IS NOT NULL
             AND unit_price IS NOT NULL AND quantity IS NOT NULL AND charge_count >= 1
             AND (kind = 'charge') = (price_version >= 1)
        ELSE origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL AND dimensions_key = ''
        END),
    DROP COLUMN period_days,
    DROP COLUMN days,
    DROP COLUMN fee_name,
    DROP COLUMN fee_code,
    DROP COLUMN plan_version,
    DROP COLUMN plan_code;
