-- The purge of keys past their TTL reads them by age.
CREATE INDEX idempotency_key_created_at ON idempotency_key (created_at);
