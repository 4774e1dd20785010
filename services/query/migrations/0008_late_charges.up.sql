-- The late-usage report (GET /v1/tenants/{tenantId}/late-usage) reads the
-- late charges of a tenant's billed period page by page, in (usage event id,
-- event id) order: one range scan of this index, however few of the
-- period's charges are late.
CREATE INDEX projected_late_charge_idx
    ON projected_event (tenant_id, period, origin_event_id, event_id)
    WHERE event_type = 'ChargeRated' AND (payload->>'late') = 'true';
