-- The audit is append-only: rows of retried intents stay, so the narrower
-- check is not validated against them.
ALTER TABLE redrive_audit DROP CONSTRAINT redrive_audit_action_check;
ALTER TABLE redrive_audit ADD CONSTRAINT redrive_audit_action_check
    CHECK (action IN ('redecide', 'release_dead_letter')) NOT VALID;
