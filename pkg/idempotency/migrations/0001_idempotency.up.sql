-- Responses of commands sent with an Idempotency-Key, so a replay returns
-- the first response instead of acting twice.
CREATE TABLE idempotency_key (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    request_hash text        NOT NULL,
    status       integer     NOT NULL DEFAULT 0,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);
