CREATE INDEX projected_event_tenant_all_idx ON projected_event (tenant_id, event_type, period);
DROP INDEX projected_event_tenant_idx;
ALTER INDEX projected_event_tenant_all_idx RENAME TO projected_event_tenant_idx;
