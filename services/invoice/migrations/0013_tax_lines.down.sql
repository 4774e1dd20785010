DROP INDEX invoice_line_tax_key;
DROP INDEX invoice_line_origin_key;
CREATE UNIQUE INDEX invoice_line_origin_key ON invoice_line (origin_event_id)
    WHERE kind NOT IN ('rounding', 'fixed_fee', 'minimum_true_up');
ALTER TABLE invoice_line
    DROP CONSTRAINT invoice_line_shape_check,
    DROP CONSTRAINT invoice_line_kind_check;
-- Tax lines cannot be kept: the lines are immutable, so a database with
-- issued tax lines cannot go back below 0013.
ALTER TABLE invoice_line
    ADD CONSTRAINT invoice_line_kind_check
        CHECK (kind IN ('charge', 'unpriced', 'adjustment', 'rounding', 'fixed_fee', 'minimum_true_up')),
    ADD CONSTRAINT invoice_line_shape_check CHECK (CASE
        WHEN kind IN ('charge', 'unpriced')
        THEN origin_event_id IS NULL AND meter_code IS NOT NULL AND price_version IS NOT NULL
             AND unit_price IS NOT NULL AND quantity IS NOT NULL AND charge_count >= 1
             AND (kind = 'charge') = (price_version >= 1) AND plan_code IS NULL
        WHEN kind IN ('fixed_fee', 'minimum_true_up')
        THEN origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL AND dimensions_key = ''
             AND plan_code IS NOT NULL AND plan_version >= 1 AND days >= 1 AND period_days BETWEEN days AND 31
             AND (kind = 'fixed_fee') = (fee_code IS NOT NULL) AND amount >= 0
        ELSE origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL AND dimensions_key = ''
             AND plan_code IS NULL
        END),
    DROP COLUMN tax_rate,
    DROP COLUMN tax_name,
    DROP COLUMN tax_code;
ALTER TABLE invoice DROP COLUMN tax_total;
