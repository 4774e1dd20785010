-- Every money-changing command records its actor: who activated a price
-- version (the subject of the bearer token that sent it). Versions activated
-- before this migration have none (NULL); the constraint is NOT VALID, so it
-- holds for every version activated from now on without refusing the old
-- ones.
ALTER TABLE price ADD COLUMN actor text;
ALTER TABLE price ADD CONSTRAINT price_actor_check
    CHECK (actor IS NOT NULL AND char_length(actor) BETWEEN 1 AND 256) NOT VALID;
