-- Reconciliation reads a tenant's charges and adjustments of one period page
-- by page, in the order the other services' sets are merged with them
-- (GET /internal/v1/reconciliation/{set}): each page is one range scan.
CREATE INDEX charge_reconciliation_idx ON charge (tenant_id, period, usage_event_id, event_id);
-- Late charges (rated into a later period than their usage occurred in),
-- found from either month.
CREATE INDEX charge_late_period_idx ON charge (tenant_id, period) WHERE late;
CREATE INDEX charge_late_occurred_idx
    ON charge (tenant_id, (date_trunc('month', occurred_at AT TIME ZONE 'UTC')), usage_event_id, event_id) WHERE late;
CREATE INDEX adjustment_reconciliation_idx ON adjustment (tenant_id, period, event_id);
