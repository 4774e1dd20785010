DROP TABLE idempotency_key;
