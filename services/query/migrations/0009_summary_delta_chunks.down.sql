CREATE INDEX summary_delta_tenant_idx ON summary_delta (tenant_id);
DROP INDEX summary_delta_tenant_seq_idx;
