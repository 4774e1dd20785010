CREATE INDEX charge_late_period_idx ON charge (tenant_id, period) WHERE late;
CREATE INDEX charge_late_occurred_idx
    ON charge (tenant_id, (date_trunc('month', occurred_at AT TIME ZONE 'UTC')), usage_event_id, event_id) WHERE late;
DROP INDEX charge_off_month_occurred_idx;
DROP INDEX charge_off_month_period_idx;
