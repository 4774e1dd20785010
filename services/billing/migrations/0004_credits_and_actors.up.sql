-- Every money-changing command records its actor (the subject of the bearer
-- token that sent it): who posted an adjustment, who closed a period. Rows
-- written before this migration have none (NULL); the constraints are NOT
-- VALID, so they hold for every row written from now on without rewriting
-- or refusing the old ones.
ALTER TABLE adjustment ADD COLUMN actor text;
ALTER TABLE adjustment ADD CONSTRAINT adjustment_actor_check
    CHECK (actor IS NOT NULL AND char_length(actor) BETWEEN 1 AND 256) NOT VALID;

ALTER TABLE billing_period ADD COLUMN closed_by text;
ALTER TABLE billing_period ADD CONSTRAINT billing_period_closed_by_check
    CHECK (status <> 'closed' OR (closed_by IS NOT NULL AND char_length(closed_by) BETWEEN 1 AND 256)) NOT VALID;
