DROP FUNCTION outbox_event_months(text, text, uuid, uuid);
CREATE TABLE outbox_event_flat (
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
INSERT INTO outbox_event_flat OVERRIDING SYSTEM VALUE SELECT * FROM outbox_event;
DO $$ BEGIN
    EXECUTE format('ALTER TABLE outbox_event_flat ALTER COLUMN id RESTART WITH %s',
                   (SELECT COALESCE(max(id), 0) + 1 FROM outbox_event));
END $$;
DROP TABLE outbox_event;
ALTER TABLE outbox_event_flat RENAME TO outbox_event;
ALTER TABLE outbox_event RENAME CONSTRAINT outbox_event_flat_pkey TO outbox_event_pkey;
CREATE INDEX outbox_event_pending ON outbox_event (shard, id)
    WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_event_published ON outbox_event (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX outbox_event_dead ON outbox_event (id)
    WHERE dead_at IS NOT NULL;
CREATE TRIGGER outbox_event_notify AFTER INSERT ON outbox_event
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
