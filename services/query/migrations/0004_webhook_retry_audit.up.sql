-- An operator's retry of a failed or expired webhook intent of the invoice
-- service is audited in redrive_audit like a redrive: the 'requested' row
-- (actor, correlation id, reason) before query asks the invoice service,
-- the 'completed' row with the outcome it answered (rescheduled, not_found,
-- not_retryable). event_id is the intent's id.
ALTER TABLE redrive_audit DROP CONSTRAINT redrive_audit_action_check;
ALTER TABLE redrive_audit ADD CONSTRAINT redrive_audit_action_check
    CHECK (action IN ('redecide', 'release_dead_letter', 'retry_webhook_intent'));
