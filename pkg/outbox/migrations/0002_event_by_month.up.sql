-- outbox_event is partitioned by month of its event id (UUIDv7, whose first
-- 48 bits are its Unix time in milliseconds), so retention drops a month of
-- published rows instead of deleting them one batch at a time (decision
-- 0024, the outbox and the inbox by month). The primary key on event_id
-- stays global: the key is the partition key.
--
-- No downtime: the table as it is becomes the DEFAULT partition, which takes
-- every id outside the month partitions (attaching a default to a table with
-- no other partition reads none of its rows); its pending rows stay where
-- the relay finds them. id keeps counting from where the old identity was.
ALTER TABLE outbox_event RENAME TO outbox_event_default;
ALTER TABLE outbox_event_default RENAME CONSTRAINT outbox_event_pkey TO outbox_event_default_pkey;
ALTER INDEX outbox_event_pending RENAME TO outbox_event_default_pending;
ALTER INDEX outbox_event_published RENAME TO outbox_event_default_published;
ALTER INDEX outbox_event_dead RENAME TO outbox_event_default_dead;
DROP TRIGGER outbox_event_notify ON outbox_event_default;

CREATE TABLE outbox_event (
    event_id        uuid        NOT NULL,
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
    dead_at         timestamptz,
    PRIMARY KEY (event_id)
) PARTITION BY RANGE (event_id);
DO $$ BEGIN
    EXECUTE format('ALTER TABLE outbox_event ALTER COLUMN id RESTART WITH %s',
                   nextval(pg_get_serial_sequence('outbox_event_default', 'id')));
END $$;
ALTER TABLE outbox_event_default ALTER COLUMN id DROP IDENTITY;

CREATE INDEX outbox_event_pending ON outbox_event (shard, id)
    WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_event_published ON outbox_event (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX outbox_event_dead ON outbox_event (id)
    WHERE dead_at IS NOT NULL;

ALTER TABLE outbox_event ATTACH PARTITION outbox_event_default DEFAULT;

CREATE TRIGGER outbox_event_notify AFTER INSERT ON outbox_event
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- The month upkeep's DDL, for the service's runtime role, which owns no
-- table (pkg/pgmigrate roles.go): SECURITY DEFINER runs it as the owner,
-- limited to these operations on this table's month partitions (the month
-- checked as YYYYMM, the bounds typed as uuid). pkg/monthpart calls it.
CREATE FUNCTION outbox_event_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    part text := 'outbox_event_p' || month;
    chk  text := 'outbox_event_p' || month || '_not_in_default';
BEGIN
    IF month !~ '^[0-9]{6}$' THEN
        RAISE EXCEPTION 'month % is not YYYYMM', month;
    END IF;
    CASE op
    WHEN 'add_check' THEN
        EXECUTE format('ALTER TABLE outbox_event_default DROP CONSTRAINT IF EXISTS %I', chk);
        EXECUTE format('ALTER TABLE outbox_event_default ADD CONSTRAINT %I CHECK (event_id < %L OR event_id >= %L) NOT VALID',
                       chk, lo, hi);
    WHEN 'validate_check' THEN
        EXECUTE format('ALTER TABLE outbox_event_default VALIDATE CONSTRAINT %I', chk);
    WHEN 'drop_check' THEN
        EXECUTE format('ALTER TABLE outbox_event_default DROP CONSTRAINT IF EXISTS %I', chk);
    WHEN 'create' THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF outbox_event FOR VALUES FROM (%L) TO (%L)',
                       part, lo, hi);
    WHEN 'detach' THEN
        EXECUTE format('ALTER TABLE outbox_event DETACH PARTITION %I', part);
    WHEN 'drop' THEN
        IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(part)) THEN
            RAISE EXCEPTION '% is still a partition: detach it first', part;
        END IF;
        EXECUTE format('DROP TABLE %I', part);
    ELSE
        RAISE EXCEPTION 'unknown operation %', op;
    END CASE;
END $$;
