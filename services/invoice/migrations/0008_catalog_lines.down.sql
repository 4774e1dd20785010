-- Back to 0007: one charge line per meter and price version. Unpriced
-- lines and charges, which 0007 cannot hold, are removed (the immutability
-- triggers are lifted for that only); the aggregation and dimensions of
-- the other charges are dropped.
ALTER TABLE invoice_line DISABLE TRIGGER invoice_line_immutable;
DELETE FROM invoice_line WHERE kind = 'unpriced';
ALTER TABLE invoice_line ENABLE TRIGGER invoice_line_immutable;
ALTER TABLE invoice_charge DISABLE TRIGGER invoice_charge_immutable;
DELETE FROM invoice_charge WHERE unpriced;
ALTER TABLE invoice_charge ENABLE TRIGGER invoice_charge_immutable;

DROP INDEX invoice_line_charge_key;
CREATE UNIQUE INDEX invoice_line_charge_key ON invoice_line (invoice_id, meter_code, price_version)
    WHERE kind = 'charge';
ALTER TABLE invoice_line
    DROP CONSTRAINT invoice_line_shape_check,
    ADD CONSTRAINT invoice_line_shape_check CHECK (CASE WHEN kind = 'charge'
        THEN origin_event_id IS NULL AND meter_code IS NOT NULL AND price_version IS NOT NULL
             AND unit_price IS NOT NULL AND quantity IS NOT NULL AND charge_count >= 1
        ELSE origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL
        END),
    DROP CONSTRAINT invoice_line_kind_check,
    ADD CONSTRAINT invoice_line_kind_check CHECK (kind IN ('charge', 'adjustment', 'rounding')),
    DROP COLUMN dimensions_key;

DROP TABLE invoice_line_value;
DROP TABLE invoice_line_figure;

DROP INDEX invoice_charge_line_idx;
CREATE INDEX invoice_charge_line_idx
    ON invoice_charge (tenant_id, period, currency, meter_code, price_version, unit_price);
ALTER TABLE invoice_charge
    DROP COLUMN unpriced,
    DROP COLUMN dimensions_key,
    DROP COLUMN aggregation;
