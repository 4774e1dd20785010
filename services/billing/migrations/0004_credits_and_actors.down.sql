ALTER TABLE billing_period DROP CONSTRAINT billing_period_closed_by_check;
ALTER TABLE billing_period DROP COLUMN closed_by;
ALTER TABLE adjustment DROP CONSTRAINT adjustment_actor_check;
ALTER TABLE adjustment DROP COLUMN actor;
