-- Events written in the business transaction, waiting for the relay.
-- A row is pending while published_at and dead_at are both NULL.
-- id orders rows (commit order per key) but has no index of its own: with
-- one, the planner, misled by a skewed shard distribution, walks it to find
-- a shard's rows instead of the pending index (see the EXPLAIN test).
CREATE TABLE outbox_event (
    event_id        uuid        PRIMARY KEY,
    id              bigint      GENERATED ALWAYS AS IDENTITY,
    topic           text        NOT NULL,
    partition_key   text        NOT NULL,
    shard           smallint    NOT NULL,
    event_type      text        NOT NULL,
    envelope        bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    last_attempt_at timestamptz,
    published_at    timestamptz,
    dead_at         timestamptz
);

-- The claim reads the oldest pending rows of one shard: a range scan of this
-- index, whatever the size of the backlog in other shards.
CREATE INDEX outbox_event_pending ON outbox_event (shard, id)
    WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_event_published ON outbox_event (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX outbox_event_dead ON outbox_event (id)
    WHERE dead_at IS NOT NULL;

-- Shards of hash(partition_key). A relay sends a shard's rows only while it
-- holds the shard's lease; the owner token fences its marks.
CREATE TABLE outbox_shard (
    shard       smallint    PRIMARY KEY,
    owner       uuid,
    lease_until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO outbox_shard (shard) SELECT generate_series(0, 63);

-- Live relay instances, so each can take its fair share of shards.
CREATE TABLE outbox_relay (
    owner   uuid        PRIMARY KEY,
    seen_at timestamptz NOT NULL
);

-- Wake relays at commit of any transaction that appended events.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_event', '');
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_event_notify AFTER INSERT ON outbox_event
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
