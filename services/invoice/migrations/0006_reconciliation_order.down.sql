DROP INDEX invoice_charge_reconciliation_idx;
ALTER TABLE invoice_charge DROP COLUMN usage_event_id;
