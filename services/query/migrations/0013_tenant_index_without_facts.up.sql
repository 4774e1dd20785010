-- projected_event_tenant_idx no longer holds the events that come once per
-- fact (UsageAccepted, ChargeRated): every read of them by tenant has its own
-- partial index (projected_usage_reconciliation_idx,
-- projected_charge_reconciliation_idx), and every read through this one names
-- another type (adjustments, invoices, correction notes, closed periods). It
-- took two of the seven index entries a fact wrote in projected_event, and
-- with many tenants the costliest: one place of insertion per tenant and type,
-- on keys that repeat for a whole month (docs/cpu-per-fact.md, "Step 22").
--
-- The new index is built before the old one is dropped: reads go on
-- throughout; the projection's writes wait for the build, which reads every
-- month once and writes an entry only for the few events of the other types,
-- and the consumer then catches up from its offsets.
CREATE INDEX projected_event_tenant_other_idx ON projected_event (tenant_id, event_type, period)
    WHERE event_type NOT IN ('UsageAccepted', 'ChargeRated');
DROP INDEX projected_event_tenant_idx;
ALTER INDEX projected_event_tenant_other_idx RENAME TO projected_event_tenant_idx;
