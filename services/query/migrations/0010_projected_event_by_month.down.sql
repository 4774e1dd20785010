DROP FUNCTION projected_event_archive(timestamptz);
DROP TABLE projected_event_archived;
DROP FUNCTION query_uuid7_floor(timestamptz);
DROP FUNCTION projected_event_months(text, text, uuid, uuid);
CREATE TABLE projected_event_flat (LIKE projected_event INCLUDING DEFAULTS);
INSERT INTO projected_event_flat SELECT * FROM projected_event;
DROP TABLE projected_event;
ALTER TABLE projected_event_flat RENAME TO projected_event;
ALTER TABLE projected_event ADD CONSTRAINT projected_event_pkey PRIMARY KEY (event_id);
CREATE INDEX projected_event_tenant_idx ON projected_event (tenant_id, event_type, period);
CREATE INDEX projected_event_origin_idx ON projected_event (origin_event_id) WHERE origin_event_id IS NOT NULL;
CREATE INDEX projected_usage_reconciliation_idx
    ON projected_event (tenant_id, period, event_id) WHERE event_type = 'UsageAccepted';
CREATE INDEX projected_charge_reconciliation_idx
    ON projected_event (tenant_id, period, origin_event_id, event_id) WHERE event_type = 'ChargeRated';
CREATE INDEX projected_late_charge_idx
    ON projected_event (tenant_id, period, origin_event_id, event_id)
    WHERE event_type = 'ChargeRated' AND (payload->>'late') = 'true';
