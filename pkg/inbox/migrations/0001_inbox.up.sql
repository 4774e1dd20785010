-- Events this service has applied (or absorbed as duplicates of an effect it
-- already holds). The primary key absorbs redeliveries of one event; the
-- unique aggregate slot absorbs a second event claiming an applied version and
-- is what the gap check reads. The aggregate identity includes the tenant:
-- aggregate ids are not promised to be unique across tenants.
CREATE TABLE inbox_event (
    event_id          uuid        PRIMARY KEY,
    payload_digest    text        NOT NULL,
    event_type        text        NOT NULL,
    tenant_id         text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    applied_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbox_event_aggregate_slot
        UNIQUE (tenant_id, aggregate_type, aggregate_id, aggregate_version)
);

-- Events that wait for something: their aggregate's previous version
-- (wait_key "agg/<tenant>/<type>/<id>@<version>") or a fact named by the
-- handler ("price/t1/api_calls/USD@3"). raw is the message exactly as
-- received; it is decoded again, through the decoders of the day, whenever
-- the event is re-decided.
CREATE TABLE inbox_deferred (
    event_id          uuid        PRIMARY KEY,
    wait_key          text        NOT NULL,
    reason            text        NOT NULL,
    raw               bytea       NOT NULL,
    payload_digest    text        NOT NULL,
    event_type        text        NOT NULL,
    tenant_id         text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    topic             text        NOT NULL,
    partition         integer     NOT NULL,
    "offset"          bigint      NOT NULL,
    first_seen        timestamptz NOT NULL DEFAULT now(),
    last_attempt      timestamptz NOT NULL DEFAULT now(),
    -- When the sweep tries it again: at once after the first deferral (to
    -- catch a wake missed by a concurrent commit), then backing off
    -- exponentially to 5 minutes, as waking is the normal path.
    next_attempt      timestamptz NOT NULL DEFAULT now(),
    attempts          integer     NOT NULL DEFAULT 1
);

CREATE INDEX inbox_deferred_wait_key ON inbox_deferred (wait_key);
CREATE INDEX inbox_deferred_next_attempt ON inbox_deferred (next_attempt);
CREATE INDEX inbox_deferred_first_seen ON inbox_deferred (first_seen);

-- Messages that can never be processed as they are. Kept until an operator
-- redrives them (state 'redriven'), never deleted. Identical bytes delivered
-- again are one row with more attempts. event_id and tenant_id are NULL when
-- the bytes are not an envelope at all.
CREATE TABLE inbox_quarantine (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    raw_sha256  text        NOT NULL UNIQUE,
    event_id    uuid,
    event_type  text,
    tenant_id   text,
    reason      text        NOT NULL,
    raw         bytea       NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    first_seen  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    attempts    integer     NOT NULL DEFAULT 1,
    state       text        NOT NULL DEFAULT 'quarantined'
                CHECK (state IN ('quarantined', 'redriven')),
    redriven_at timestamptz
);

CREATE INDEX inbox_quarantine_event_id ON inbox_quarantine (event_id);
CREATE INDEX inbox_quarantine_open ON inbox_quarantine (first_seen)
    WHERE state = 'quarantined';
