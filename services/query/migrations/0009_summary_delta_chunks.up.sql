-- The folder and the summary read walk a tenant's summary deltas in keyset
-- chunks of seq (QUERY_FOLD_CHUNK): each chunk is one range scan of this
-- index, bounded by the chunk whatever the tenant's backlog. It replaces
-- the index on tenant_id alone (its prefix).
CREATE INDEX summary_delta_tenant_seq_idx ON summary_delta (tenant_id, seq);
DROP INDEX summary_delta_tenant_idx;
