-- Reconciliation merges invoice's counted charges with usage's facts and
-- billing's charges by the UsageAccepted event each charge rates, page by
-- page (GET /internal/v1/reconciliation/{set}); a charge now records it.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM invoice_charge) THEN
        RAISE EXCEPTION 'invoice_charge holds rows without the usage event they rate: '
            'migrate an empty invoice database (this schema is new in this release)';
    END IF;
END $$;

ALTER TABLE invoice_charge ADD COLUMN usage_event_id uuid NOT NULL;
CREATE INDEX invoice_charge_reconciliation_idx ON invoice_charge (tenant_id, period, usage_event_id, origin_event_id);
