DROP FUNCTION invoice_charge_archive(timestamptz);
DROP TABLE invoice_charge_archived;
DROP FUNCTION invoice_uuid7_floor(timestamptz);
DROP FUNCTION invoice_charge_months(text, text, uuid, uuid);
CREATE TABLE invoice_charge_flat (LIKE invoice_charge INCLUDING DEFAULTS);
INSERT INTO invoice_charge_flat SELECT * FROM invoice_charge;
DROP TABLE invoice_charge;
ALTER TABLE invoice_charge_flat RENAME TO invoice_charge;
ALTER TABLE invoice_charge ADD CONSTRAINT invoice_charge_origin_key PRIMARY KEY (origin_event_id);
CREATE INDEX invoice_charge_line_idx
    ON invoice_charge (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced, unit_price);
CREATE INDEX invoice_charge_reconciliation_idx ON invoice_charge (tenant_id, period, usage_event_id, origin_event_id);
CREATE TRIGGER invoice_charge_immutable BEFORE UPDATE OR DELETE ON invoice_charge
    FOR EACH ROW EXECUTE FUNCTION invoice_refuse_change();
