-- Failed and expired webhook intents are purged past WEBHOOK_FAILED_RETENTION
-- (an operator may retry them until then); this index finds them.
CREATE INDEX webhook_intent_failed_finished_idx ON webhook_intent (finished_at)
    WHERE status IN ('failed', 'expired');
