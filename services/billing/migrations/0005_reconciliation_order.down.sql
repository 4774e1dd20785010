DROP INDEX adjustment_reconciliation_idx;
DROP INDEX charge_late_occurred_idx;
DROP INDEX charge_late_period_idx;
DROP INDEX charge_reconciliation_idx;
