-- inbox_event is partitioned by month of its event id (UUIDv7, whose first
-- 48 bits are its Unix time in milliseconds), so retention drops a month
-- instead of deleting its rows one batch at a time (decision 0024, the
-- outbox and the inbox by month). The primary key on event_id stays global:
-- the key is the partition key. The aggregate slot can only be unique within
-- a partition; each month partition carries its own (created by the
-- service's upkeep, pkg/monthpart), and the inbox looks across months for
-- another holder of an event's slot when it claims it.
--
-- No downtime: the table as it is becomes the DEFAULT partition, which takes
-- every id outside the month partitions; attaching a default to a table with
-- no other partition reads none of its rows. Month partitions are created
-- from the month after the last row the default holds (see Ensure), and the
-- default's old rows leave it by the row purge, past the retention.
ALTER TABLE inbox_event RENAME TO inbox_event_default;
ALTER TABLE inbox_event_default RENAME CONSTRAINT inbox_event_pkey TO inbox_event_default_pkey;
ALTER INDEX inbox_event_applied_at RENAME TO inbox_event_default_applied_at;

CREATE TABLE inbox_event (
    event_id          uuid        NOT NULL,
    payload_digest    text        NOT NULL,
    event_type        text        NOT NULL,
    tenant_id         text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    applied_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id)
) PARTITION BY RANGE (event_id);
CREATE INDEX inbox_event_applied_at ON inbox_event (applied_at);

ALTER TABLE inbox_event ATTACH PARTITION inbox_event_default DEFAULT;

-- The month upkeep's DDL, for the service's runtime role, which owns no
-- table (pkg/pgmigrate roles.go): SECURITY DEFINER runs it as the owner,
-- limited to these operations on this table's month partitions (the month
-- checked as YYYYMM, the bounds typed as uuid). pkg/monthpart calls it.
CREATE FUNCTION inbox_event_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    part text := 'inbox_event_p' || month;
    chk  text := 'inbox_event_p' || month || '_not_in_default';
BEGIN
    IF month !~ '^[0-9]{6}$' THEN
        RAISE EXCEPTION 'month % is not YYYYMM', month;
    END IF;
    CASE op
    WHEN 'add_check' THEN
        EXECUTE format('ALTER TABLE inbox_event_default DROP CONSTRAINT IF EXISTS %I', chk);
        EXECUTE format('ALTER TABLE inbox_event_default ADD CONSTRAINT %I CHECK (event_id < %L OR event_id >= %L) NOT VALID',
                       chk, lo, hi);
    WHEN 'validate_check' THEN
        EXECUTE format('ALTER TABLE inbox_event_default VALIDATE CONSTRAINT %I', chk);
    WHEN 'drop_check' THEN
        EXECUTE format('ALTER TABLE inbox_event_default DROP CONSTRAINT IF EXISTS %I', chk);
    WHEN 'create' THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF inbox_event (CONSTRAINT %I UNIQUE (tenant_id, aggregate_type, aggregate_id, aggregate_version)) FOR VALUES FROM (%L) TO (%L)',
                       part, part || '_slot', lo, hi);
    WHEN 'detach' THEN
        EXECUTE format('ALTER TABLE inbox_event DETACH PARTITION %I', part);
    WHEN 'drop' THEN
        IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(part)) THEN
            RAISE EXCEPTION '% is still a partition: detach it first', part;
        END IF;
        EXECUTE format('DROP TABLE %I', part);
    ELSE
        RAISE EXCEPTION 'unknown operation %', op;
    END CASE;
END $$;
