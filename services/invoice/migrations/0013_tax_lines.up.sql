-- Tax lines (DESIGN.md section 3a): billing's BillingPeriodClosed carries
-- the period's tax rates; at issue each invoice gets one tax line per rate,
-- rate x the subtotal rounded to the currency's minor unit, rounded
-- half-even (origin: the close), and its tax_total; total = the rounded
-- subtotal + tax_total.
ALTER TABLE invoice ADD COLUMN tax_total numeric NOT NULL DEFAULT 0 CHECK (tax_total >= 0);
ALTER TABLE invoice_line
    ADD COLUMN tax_code text,
    ADD COLUMN tax_name text,
    ADD COLUMN tax_rate numeric,
    DROP CONSTRAINT invoice_line_kind_check,
    ADD CONSTRAINT invoice_line_kind_check
        CHECK (kind IN ('charge', 'unpriced', 'adjustment', 'rounding', 'fixed_fee', 'minimum_true_up', 'tax')),
    DROP CONSTRAINT invoice_line_shape_check,
    ADD CONSTRAINT invoice_line_shape_check CHECK (CASE
        WHEN kind IN ('charge', 'unpriced')
        THEN origin_event_id IS NULL AND meter_code IS NOT NULL AND price_version IS NOT NULL
             AND unit_price IS NOT NULL AND quantity IS NOT NULL AND charge_count >= 1
             AND (kind = 'charge') = (price_version >= 1) AND plan_code IS NULL AND tax_code IS NULL
        WHEN kind IN ('fixed_fee', 'minimum_true_up')
        THEN origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL AND dimensions_key = ''
             AND plan_code IS NOT NULL AND plan_version >= 1 AND days >= 1 AND period_days BETWEEN days AND 31
             AND (kind = 'fixed_fee') = (fee_code IS NOT NULL) AND amount >= 0 AND tax_code IS NULL
        WHEN kind = 'tax'
        THEN origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL AND dimensions_key = ''
             AND plan_code IS NULL AND fee_code IS NULL AND tax_code IS NOT NULL AND tax_name IS NOT NULL
             AND tax_rate >= 0 AND tax_rate < 1 AND amount >= 0
        ELSE origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL AND dimensions_key = ''
             AND plan_code IS NULL AND tax_code IS NULL
        END);
DROP INDEX invoice_line_origin_key;
CREATE UNIQUE INDEX invoice_line_origin_key ON invoice_line (origin_event_id)
    WHERE kind NOT IN ('rounding', 'fixed_fee', 'minimum_true_up', 'tax');
CREATE UNIQUE INDEX invoice_line_tax_key ON invoice_line (invoice_id, tax_code) WHERE kind = 'tax';
