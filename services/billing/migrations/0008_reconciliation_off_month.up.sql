-- Reconciliation groups usage by the UTC month it occurred in. A charge
-- rated into another period than that month (late, or a tenant in another
-- time zone whose period boundary is hours away from the UTC one, decision
-- 0014) is found from either month, as late charges were (0005): these
-- partial indexes hold only those charges. The predicate is the one the
-- reconciliation queries use (built from immutable functions only).
CREATE INDEX charge_off_month_period_idx ON charge (tenant_id, period)
    WHERE late OR make_timestamp(substr(period, 1, 4)::int, substr(period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', occurred_at AT TIME ZONE 'UTC');
CREATE INDEX charge_off_month_occurred_idx
    ON charge (tenant_id, (date_trunc('month', occurred_at AT TIME ZONE 'UTC')), usage_event_id, event_id)
    WHERE late OR make_timestamp(substr(period, 1, 4)::int, substr(period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', occurred_at AT TIME ZONE 'UTC');
-- The late-only indexes they replace.
DROP INDEX charge_late_period_idx;
DROP INDEX charge_late_occurred_idx;
