-- Reconciliation reads the projected usage and charges of a tenant's month
-- page by page, in the order they are merged with the other services' sets
-- (usage event id): each page is one range scan.
CREATE INDEX projected_usage_reconciliation_idx
    ON projected_event (tenant_id, period, event_id) WHERE event_type = 'UsageAccepted';
CREATE INDEX projected_charge_reconciliation_idx
    ON projected_event (tenant_id, period, origin_event_id, event_id) WHERE event_type = 'ChargeRated';
