-- ReconciliationMonths lists the distinct UTC months a period's off-month
-- charges occurred in, and the distinct periods the off-month usage of a
-- UTC month was rated into, by skip scans (so that no statement grows with
-- a tenant's volume): one probe of an index for the next month
-- (or period) after the last one found. The indexes of migration 0008 did
-- not key on those columns, so the lists read every off-month charge (all
-- of a period's late charges; about 2% of the charges of a tenant in
-- another time zone). These hold the same charges, under the same
-- predicate, with the month and the period in their keys; the first
-- replaces charge_off_month_period_idx (its prefix), the second sits
-- beside charge_off_month_occurred_idx, whose (usage event id, event id)
-- order the reconciliation's pages read.
--
-- On the partitioned charge table (migration 0018) each index is built on
-- every partition, holding off inserts into charge while it is: an index
-- of off-month charges only, but its build reads the whole table.
CREATE INDEX charge_off_month_period_month_idx
    ON charge (tenant_id, period, (date_trunc('month', occurred_at AT TIME ZONE 'UTC')))
    WHERE late OR make_timestamp(substr(period, 1, 4)::int, substr(period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', occurred_at AT TIME ZONE 'UTC');
CREATE INDEX charge_off_month_month_period_idx
    ON charge (tenant_id, (date_trunc('month', occurred_at AT TIME ZONE 'UTC')), period)
    WHERE late OR make_timestamp(substr(period, 1, 4)::int, substr(period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', occurred_at AT TIME ZONE 'UTC');
DROP INDEX charge_off_month_period_idx;
