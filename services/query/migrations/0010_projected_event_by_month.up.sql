-- projected_event is partitioned by month of its event id (every public
-- event's UUIDv7, made by its producer, checked by the envelope), so a month
-- whose usage and charges are all on issued invoices is archived whole
-- (detached, dumped, dropped) instead of growing forever (decision 0025,
-- facts by month). The primary key on event_id stays global: the key is the
-- partition key, so an event projected again meets its own row in its own
-- month and is a duplicate however late it comes.
--
-- No downtime, in one migration of catalog changes only (invoice's 0019,
-- decision 0024's layout): the table as it is becomes the DEFAULT partition,
-- which takes every id outside the month partitions (the events before the
-- migration, ids of a clock far ahead or of a month with no partition);
-- attaching a default to a table with no other partition reads none of its
-- rows, and its primary key and indexes are the ones the parent's match,
-- attached, not built. The month partitions are created by the service's
-- upkeep (pkg/monthpart, from the month after the last row the default
-- holds).
ALTER TABLE projected_event RENAME TO projected_event_default;
ALTER TABLE projected_event_default RENAME CONSTRAINT projected_event_pkey TO projected_event_default_pkey;
ALTER INDEX projected_event_tenant_idx RENAME TO projected_event_default_tenant_idx;
ALTER INDEX projected_event_origin_idx RENAME TO projected_event_default_origin_idx;
ALTER INDEX projected_usage_reconciliation_idx RENAME TO projected_event_default_usage_reconciliation_idx;
ALTER INDEX projected_charge_reconciliation_idx RENAME TO projected_event_default_charge_reconciliation_idx;
ALTER INDEX projected_late_charge_idx RENAME TO projected_event_default_late_charge_idx;

-- The columns in the order the old table has them (0001): the upkeep moves
-- rows between the default and a month by SELECT *.
CREATE TABLE projected_event (
    event_id          uuid        NOT NULL,
    event_type        text        NOT NULL,
    tenant_id         text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    occurred_at       timestamptz NOT NULL,
    subject_id        uuid,
    origin_event_id   uuid,
    period            text,
    meter_code        text,
    currency          text,
    quantity          numeric,
    unit_price        numeric,
    amount            numeric,
    payload           jsonb       NOT NULL,
    projected_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT projected_event_pkey PRIMARY KEY (event_id)
) PARTITION BY RANGE (event_id);
CREATE INDEX projected_event_tenant_idx ON projected_event (tenant_id, event_type, period);
CREATE INDEX projected_event_origin_idx ON projected_event (origin_event_id) WHERE origin_event_id IS NOT NULL;
CREATE INDEX projected_usage_reconciliation_idx
    ON projected_event (tenant_id, period, event_id) WHERE event_type = 'UsageAccepted';
CREATE INDEX projected_charge_reconciliation_idx
    ON projected_event (tenant_id, period, origin_event_id, event_id) WHERE event_type = 'ChargeRated';
CREATE INDEX projected_late_charge_idx
    ON projected_event (tenant_id, period, origin_event_id, event_id)
    WHERE event_type = 'ChargeRated' AND (payload->>'late') = 'true';

ALTER TABLE projected_event ATTACH PARTITION projected_event_default DEFAULT;

-- The upkeep's DDL for the runtime role (pkg/monthpart's shared body):
-- creating a month ahead, and the default's CHECK that spares the creation
-- its scan. Detaching or dropping a month is not the runtime role's: it is
-- projected_event_archive's, below.
CREATE FUNCTION projected_event_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF op NOT IN ('create', 'add_check', 'validate_check', 'drop_check') THEN
        RAISE EXCEPTION 'operation % is not the upkeep''s', op;
    END IF;
    PERFORM monthpart_ddl('projected_event', 'event_id', op, month, lo, hi, NULL);
END $$;

-- The months archived: an event of one delivered again (a replay, a
-- redrive) is a duplicate of the row that was archived, as it was while the
-- row was here (Project reads this beside projected_event), so no summary
-- counts it twice.
CREATE TABLE projected_event_archived (
    partition   text        PRIMARY KEY,
    lo          uuid        NOT NULL,
    hi          uuid        NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now()
);

-- The smallest UUIDv7 of instant t: its Unix milliseconds, then zeros (a
-- month's bounds, as pkg/monthpart's Bound).
CREATE FUNCTION query_uuid7_floor(t timestamptz) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT
    RETURN (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid;

-- projected_event_archive(t) detaches the month partition of t (UTC) and
-- returns its name, for the operator to dump (pg_dump -t) and drop. It
-- refuses (SQLSTATE 55000) a month not over, or holding a usage fact, a
-- charge or an adjustment that is not on an issued invoice: reconciliation,
-- the charges' trace and the usage reads still need them. A usage fact is
-- on an issued invoice when its charge (by origin event id, in any month)
-- is; one not yet charged keeps its month.
CREATE FUNCTION projected_event_archive(t timestamptz) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m    timestamp   := date_trunc('month', t AT TIME ZONE 'UTC');
    name text        := 'projected_event_p' || to_char(m, 'YYYYMM');
    ends timestamptz := (m + interval '1 month') AT TIME ZONE 'UTC';
    open boolean;
BEGIN
    IF ends > now() THEN
        RAISE EXCEPTION 'partition % ends at %, not over yet', name, ends
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits
                   WHERE inhparent = 'projected_event'::regclass AND inhrelid = to_regclass(quote_ident(name))) THEN
        RAISE EXCEPTION 'projected_event has no partition %', name USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format($q$
        SELECT EXISTS (
            SELECT 1 FROM %1$I e
            WHERE e.event_type IN ('ChargeRated', 'AdjustmentPosted')
              AND NOT EXISTS (SELECT 1 FROM projected_event i
                              WHERE i.tenant_id = e.tenant_id AND i.event_type = 'InvoiceIssued'
                                AND i.period = e.period AND i.currency = e.currency))
        OR EXISTS (
            SELECT 1 FROM %1$I u
            WHERE u.event_type = 'UsageAccepted'
              AND NOT EXISTS (SELECT 1 FROM projected_event c
                              JOIN projected_event i ON i.tenant_id = c.tenant_id AND i.event_type = 'InvoiceIssued'
                                                    AND i.period = c.period AND i.currency = c.currency
                              WHERE c.origin_event_id = u.event_id AND c.event_type = 'ChargeRated'))$q$, name)
        INTO open;
    IF open THEN
        RAISE EXCEPTION 'partition % holds usage, charges or adjustments not on an issued invoice', name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO projected_event_archived (partition, lo, hi)
    VALUES (name, query_uuid7_floor(m AT TIME ZONE 'UTC'), query_uuid7_floor(ends));
    EXECUTE format('ALTER TABLE projected_event DETACH PARTITION %I', name);
    RETURN name;
END $$;
-- Archiving is the owner's (an operator's), not the runtime role's.
REVOKE EXECUTE ON FUNCTION projected_event_archive(timestamptz) FROM PUBLIC;
