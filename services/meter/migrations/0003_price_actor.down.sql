ALTER TABLE price DROP CONSTRAINT price_actor_check;
ALTER TABLE price DROP COLUMN actor;
