DROP INDEX invoice_line_credit_key;
DROP INDEX invoice_line_origin_key;
CREATE UNIQUE INDEX invoice_line_origin_key ON invoice_line (origin_event_id)
    WHERE kind NOT IN ('rounding', 'fixed_fee', 'minimum_true_up', 'tax');
-- Credit lines cannot be kept: the lines are immutable, so a database with
-- issued credit lines cannot go back below 0014.
ALTER TABLE invoice_line
    DROP CONSTRAINT invoice_line_credit_amount_check,
    DROP CONSTRAINT invoice_line_credit_check,
    DROP CONSTRAINT invoice_line_kind_check,
    ADD CONSTRAINT invoice_line_kind_check
        CHECK (kind IN ('charge', 'unpriced', 'adjustment', 'rounding', 'fixed_fee', 'minimum_true_up', 'tax')),
    DROP COLUMN grant_id;
ALTER TABLE invoice DROP COLUMN amount_due, DROP COLUMN credits_applied;
DROP TABLE credit_grant;
