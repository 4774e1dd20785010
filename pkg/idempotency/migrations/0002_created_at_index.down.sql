DROP INDEX IF EXISTS idempotency_key_created_at;
