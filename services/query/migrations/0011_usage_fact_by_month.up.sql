-- usage_fact (the usage analytics' fact rows) is partitioned by month of its
-- event_id, the UsageAccepted's UUIDv7 (made by usage when it accepts the
-- fact, checked by the envelope): the key and the months of the fact's own
-- projected_event row, so a month's facts are archived with that month's
-- events, by projected_event_archive below (decision 0025, facts by month).
--
-- Unique by the fact's identity within each partition, not across them. A
-- key of the parent must hold event_id, and the table as it is has no index
-- with it: attaching it under such a key would build one over every row.
-- So the parent has no key; each month partition is made with its own
-- unique (tenant_id, source_system, source_event_id) (usage_fact_pYYYYMM_slot,
-- pkg/monthpart's slot, as inbox_event's), and the default keeps the primary
-- key it had. An event delivered again has the same id, so the same
-- partition, and meets its own row there (InsertUsageFacts' ON CONFLICT DO
-- NOTHING checks the partition's unique index): it rolls up nothing, as
-- before. A second event id for one identity is never made: usage keeps
-- every identity, with its one usage id and event id, in usage_fact_source,
-- unpartitioned and never pruned.
--
-- No downtime, in one migration of catalog changes only (0010's layout):
-- the table as it is becomes the DEFAULT partition (the facts before the
-- migration, ids outside every month); attaching a default to a table with
-- no other partition reads none of its rows, and its indexes match the
-- parent's, attached, not built. The service's upkeep makes the months
-- (pkg/monthpart, from the month after the last row the default holds).
ALTER TABLE usage_fact RENAME TO usage_fact_default;
ALTER TABLE usage_fact_default RENAME CONSTRAINT usage_fact_pkey TO usage_fact_default_pkey;
ALTER INDEX usage_fact_window RENAME TO usage_fact_default_window;
ALTER INDEX usage_fact_unrolled RENAME TO usage_fact_default_unrolled;

-- The columns in the order the old table has them (0007): the upkeep moves
-- rows between the default and a month by SELECT *. The CHECK under the
-- name the old table's has, which attaching it matches.
CREATE TABLE usage_fact (
    tenant_id       text                NOT NULL,
    source_system   text COLLATE "C"    NOT NULL,
    source_event_id text COLLATE "C"    NOT NULL,
    meter_code      text                NOT NULL,
    occurred_at     timestamptz         NOT NULL,
    event_id        uuid                NOT NULL,
    quantity        numeric             NOT NULL CONSTRAINT usage_fact_quantity_check CHECK (quantity >= 0),
    properties      jsonb               NOT NULL DEFAULT '{}',
    dims            text[] COLLATE "C",
    value           text COLLATE "C"
) PARTITION BY RANGE (event_id);
CREATE INDEX usage_fact_window ON usage_fact (tenant_id, meter_code, occurred_at)
    INCLUDE (value, dims, quantity);
CREATE INDEX usage_fact_unrolled ON usage_fact (meter_code) WHERE dims IS NULL;

ALTER TABLE usage_fact ATTACH PARTITION usage_fact_default DEFAULT;

-- The upkeep's DDL for the runtime role: creating a month ahead (with its
-- unique identity), and the default's CHECK that spares the creation its
-- scan. Detaching a month is projected_event_archive's, below.
CREATE FUNCTION usage_fact_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF op NOT IN ('create', 'add_check', 'validate_check', 'drop_check') THEN
        RAISE EXCEPTION 'operation % is not the upkeep''s', op;
    END IF;
    PERFORM monthpart_ddl('usage_fact', 'event_id', op, month, lo, hi, 'tenant_id, source_system, source_event_id');
END $$;

-- usage_fact_archived: per month archived, tenant and meter, the span of
-- occurredAt its facts had. The hourly rollups and the distinct days keep
-- every archived fact, so the windows they answer (sum, count, max, latest
-- over whole hours of a zone of whole-hour offsets; unique_count by day or
-- month, ungrouped and unfiltered) answer as before; a read of the fact rows
-- (grouped, filtered or hourly unique_count, other zones, ranges off the
-- hour) whose range meets a span is refused (facts_archived) rather than
-- answered without the month's facts.
CREATE TABLE usage_fact_archived (
    tenant_id     text        NOT NULL,
    meter_code    text        NOT NULL,
    partition     text        NOT NULL,
    occurred_from timestamptz NOT NULL,
    occurred_to   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, meter_code, partition)
);

-- projected_event_archive(t) now archives the month's facts with its
-- events: the same UsageAccepted ids, so the same month. Besides 0010's
-- refusals it refuses (55000) a month holding a fact of a meter query has no
-- definition of yet: the MeterDefined that comes would roll up only the
-- facts still here. It records the facts' spans (usage_fact_archived),
-- detaches both partitions and returns their names, projected_event's first
-- (usage_fact's only when the month has one: a month whose facts are in the
-- default keeps them there). The month's id range in projected_event_archived
-- is the one check for both tables: Project, in the transaction that
-- inserts the facts, finds an event of an archived month a duplicate, so
-- neither its event nor its fact is added again.
DROP FUNCTION projected_event_archive(timestamptz);
CREATE FUNCTION projected_event_archive(t timestamptz) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m     timestamp   := date_trunc('month', t AT TIME ZONE 'UTC');
    name  text        := 'projected_event_p' || to_char(m, 'YYYYMM');
    facts text        := 'usage_fact_p' || to_char(m, 'YYYYMM');
    ends  timestamptz := (m + interval '1 month') AT TIME ZONE 'UTC';
    open  boolean;
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
    -- The detach waits for every transaction writing projected_event, so
    -- for every one projecting facts (it writes the events first); from here
    -- until commit none begins, and the facts read below are all there are.
    EXECUTE format('ALTER TABLE projected_event DETACH PARTITION %I', name);
    RETURN NEXT name;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits
                   WHERE inhparent = 'usage_fact'::regclass AND inhrelid = to_regclass(quote_ident(facts))) THEN
        RETURN;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE dims IS NULL)', facts) INTO open;
    IF open THEN
        RAISE EXCEPTION 'partition % holds facts of a meter with no MeterDefined projected yet: its rollups would miss them', facts
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    EXECUTE format($q$
        INSERT INTO usage_fact_archived (tenant_id, meter_code, partition, occurred_from, occurred_to)
        SELECT tenant_id, meter_code, %1$L, min(occurred_at), max(occurred_at) FROM %1$I
        GROUP BY tenant_id, meter_code$q$, facts);
    EXECUTE format('ALTER TABLE usage_fact DETACH PARTITION %I', facts);
    RETURN NEXT facts;
END $$;
-- Archiving is the owner's (an operator's), not the runtime role's.
REVOKE EXECUTE ON FUNCTION projected_event_archive(timestamptz) FROM PUBLIC;
