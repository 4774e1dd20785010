-- Reconciliation reads a tenant's facts of one month in event id order, page
-- by page (GET /internal/v1/reconciliation/usage-facts): this index serves
-- each page as one range scan, whatever the month's volume.
CREATE INDEX usage_fact_reconciliation_idx
    ON usage_fact (tenant_id, (date_trunc('month', occurred_at AT TIME ZONE 'UTC')), event_id);
