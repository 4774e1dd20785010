-- Fixed-fee and minimum true-up lines (DESIGN.md section 3a): billing's
-- BillingPeriodClosed carries them per currency, prorated; the close that
-- issues the invoice writes them (origin: that close), one per plan version
-- and fee, and one true-up per plan version. A currency with fees only gets
-- its invoice at the close.
ALTER TABLE invoice_line
    ADD COLUMN plan_code    text,
    ADD COLUMN plan_version bigint,
    ADD COLUMN fee_code     text,
    ADD COLUMN fee_name     text,
    ADD COLUMN days         integer,
    ADD COLUMN period_days  integer,
    DROP CONSTRAINT invoice_line_kind_check,
    ADD CONSTRAINT invoice_line_kind_check
        CHECK (kind IN ('charge', 'unpriced', 'adjustment', 'rounding', 'fixed_fee', 'minimum_true_up')),
    DROP CONSTRAINT invoice_line_shape_check,
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
        END);
DROP INDEX invoice_line_origin_key;
CREATE UNIQUE INDEX invoice_line_origin_key ON invoice_line (origin_event_id)
    WHERE kind NOT IN ('rounding', 'fixed_fee', 'minimum_true_up');
CREATE UNIQUE INDEX invoice_line_fee_key ON invoice_line (invoice_id, kind, plan_code, plan_version, COALESCE(fee_code, ''))
    WHERE kind IN ('fixed_fee', 'minimum_true_up');
