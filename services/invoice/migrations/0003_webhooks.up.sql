-- Webhook endpoints and delivery intents.
--
-- A tenant registers endpoints; the transaction that issues an invoice or a
-- correction note writes one intent per active endpoint of the tenant (the
-- intent is the durable record of "tell this endpoint this, under this
-- key"), and a worker delivers it after commit, under a lease.

-- One row per endpoint. secret is the HMAC-SHA256 signing secret, returned
-- once, by the POST that made it; it is kept to sign deliveries. A deleted
-- endpoint keeps its row (its intents name it) with deleted_at set.
CREATE TABLE webhook_endpoint (
    endpoint_id uuid        PRIMARY KEY,
    tenant_id   text        NOT NULL,
    url         text        NOT NULL,
    secret      text        NOT NULL,
    created_by  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz,
    CONSTRAINT webhook_endpoint_url_check CHECK (url ~ '^https?://' AND length(url) <= 2048)
);
CREATE INDEX webhook_endpoint_tenant_idx ON webhook_endpoint (tenant_id, endpoint_id) WHERE deleted_at IS NULL;

-- One row per (endpoint, event told). idempotency_key is derived from the
-- event (invoice id and aggregate version: the invoice is version 1, each
-- correction note the next), so the same invoice or note never makes two
-- intents for one endpoint (webhook_intent_key). body is the exact JSON sent
-- (the event's figures, never its lines: a few hundred bytes).
--
-- status: pending (due at not_before) -> leased (a worker holds it until
-- lease_expires_at, fenced on lease_owner) -> accepted (a 2xx), or back to
-- pending (retry), or failed (a permanent refusal), or expired (not accepted
-- by expires_at). failed and expired wait for an operator (a retry makes
-- them pending again); accepted rows are purged after the retention.
CREATE TABLE webhook_intent (
    intent_id        uuid        PRIMARY KEY,
    endpoint_id      uuid        NOT NULL REFERENCES webhook_endpoint (endpoint_id),
    tenant_id        text        NOT NULL,
    idempotency_key  text        NOT NULL,
    event_id         uuid        NOT NULL,
    event_type       text        NOT NULL,
    body             text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending',
    attempts         integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    not_before       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    lease_owner      uuid,
    lease_expires_at timestamptz,
    first_attempt_at timestamptz,
    last_attempt_at  timestamptz,
    last_status_code integer,
    last_error       text,
    response_ref     text,
    finished_at      timestamptz,
    operator_retries integer     NOT NULL DEFAULT 0,
    CONSTRAINT webhook_intent_key UNIQUE (endpoint_id, idempotency_key),
    CONSTRAINT webhook_intent_status_check CHECK (status IN ('pending', 'leased', 'accepted', 'failed', 'expired')),
    CONSTRAINT webhook_intent_lease_check CHECK ((status = 'leased') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT webhook_intent_finished_check CHECK ((status IN ('accepted', 'failed', 'expired')) = (finished_at IS NOT NULL)),
    CONSTRAINT webhook_intent_body_check CHECK (length(body) <= 16384)
);
-- The worker's claims: pending rows by due time, leased rows by lease expiry.
CREATE INDEX webhook_intent_due_idx ON webhook_intent (not_before) WHERE status = 'pending';
CREATE INDEX webhook_intent_lease_idx ON webhook_intent (lease_expires_at) WHERE status = 'leased';
-- The operator's list by status, and the purge of accepted rows.
CREATE INDEX webhook_intent_status_idx ON webhook_intent (status, intent_id);
CREATE INDEX webhook_intent_tenant_idx ON webhook_intent (tenant_id, intent_id);
CREATE INDEX webhook_intent_finished_idx ON webhook_intent (finished_at) WHERE status = 'accepted';
-- The oldest open intent's age.
CREATE INDEX webhook_intent_open_idx ON webhook_intent (created_at) WHERE status IN ('pending', 'leased');
