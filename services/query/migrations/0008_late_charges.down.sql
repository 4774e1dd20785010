DROP INDEX projected_late_charge_idx;
