-- Facts by month, step 3 of 3 (decision 0025): usage_fact becomes a table
-- partitioned by range of usage_id, one partition per month (UTC) of
-- acceptance with UUIDv7 bounds, and today's table its first partition,
-- usage_fact_legacy, from the smallest usage_id to usage_fact_months'
-- legacy_until. Only catalog changes: step 2's validated check proves the
-- partition's bound, so ATTACH does not scan it.
ALTER TABLE usage_fact RENAME TO usage_fact_legacy;
ALTER TABLE usage_fact_legacy RENAME CONSTRAINT usage_fact_pkey TO usage_fact_legacy_pkey;
ALTER TABLE usage_fact_legacy RENAME CONSTRAINT usage_fact_event_id_key TO usage_fact_legacy_event_id_key;
ALTER TABLE usage_fact_legacy RENAME CONSTRAINT usage_fact_source_key TO usage_fact_legacy_source_key;
ALTER INDEX usage_fact_reconciliation_idx RENAME TO usage_fact_legacy_reconciliation_idx;
-- From here on the insert records the identity itself (InsertUsageFacts).
DROP TRIGGER usage_fact_record_source ON usage_fact_legacy;

-- usage_id stays the primary key (it is the partition key); the identity
-- and the event id are unique in usage_fact_source, for every month.
CREATE TABLE usage_fact (
    usage_id        uuid        NOT NULL,
    tenant_id       text        NOT NULL,
    source_system   text        NOT NULL,
    source_event_id text        NOT NULL,
    meter_code      text        NOT NULL,
    quantity        numeric     NOT NULL CONSTRAINT usage_fact_quantity_check CHECK (quantity >= 0),
    occurred_at     timestamptz NOT NULL,
    currency        text        NOT NULL,
    price_version   bigint      CONSTRAINT usage_fact_price_version_check CHECK (price_version >= 1),
    event_id        uuid        NOT NULL,
    accepted_at     timestamptz NOT NULL,
    properties      jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT usage_fact_pkey PRIMARY KEY (usage_id)
) PARTITION BY RANGE (usage_id);
CREATE INDEX usage_fact_reconciliation_idx
    ON usage_fact (tenant_id, (date_trunc('month', occurred_at AT TIME ZONE 'UTC')), event_id);
DO $$
BEGIN
    EXECUTE format('ALTER TABLE usage_fact ATTACH PARTITION usage_fact_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                   usage_uuid7_floor((SELECT legacy_until FROM usage_fact_months)));
END $$;

-- Creates the partition of the month (UTC) holding t, unless it exists, was
-- archived under its name, or the first partition holds that month; true
-- when it made one. SECURITY DEFINER: the service's runtime role keeps its
-- months ahead (an insert must never lack a partition) without owning the
-- table.
CREATE FUNCTION usage_fact_add_month(t timestamptz) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m    timestamp := date_trunc('month', t AT TIME ZONE 'UTC');
    name text      := 'usage_fact_' || to_char(m, 'YYYY_MM');
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('usage.fact_months', 0));
    IF (m AT TIME ZONE 'UTC') < (SELECT legacy_until FROM usage_fact_months)
       OR to_regclass(quote_ident(name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF usage_fact FOR VALUES FROM (%L) TO (%L)', name,
                   usage_uuid7_floor(m AT TIME ZONE 'UTC'),
                   usage_uuid7_floor((m + interval '1 month') AT TIME ZONE 'UTC'));
    RETURN true;
END $$;

-- The partitions of this month and the ahead months after it; how many it
-- made. The service calls it at start and every hour.
CREATE FUNCTION usage_fact_add_months(ahead integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    made integer := 0;
BEGIN
    FOR i IN 0..ahead LOOP
        IF usage_fact_add_month((date_trunc('month', now() AT TIME ZONE 'UTC')
                                 + make_interval(months => i)) AT TIME ZONE 'UTC') THEN
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END $$;
SELECT usage_fact_add_months(3);

-- Archives the month (UTC) holding t: detaches its partition, which stays a
-- table of its own to dump and drop, and returns its name. Refused (55000)
-- unless the month is over and usage's watermark cut, published, is past
-- its end: every fact accepted in it has committed and its UsageAccepted
-- has reached the broker. A month the first partition holds archives that
-- whole partition. The identities stay in usage_fact_source: a source
-- identity of an archived fact is refused, never accepted again.
CREATE FUNCTION usage_fact_archive(t timestamptz) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m      timestamp   := date_trunc('month', t AT TIME ZONE 'UTC');
    name   text        := 'usage_fact_' || to_char(m, 'YYYY_MM');
    ends   timestamptz := (m + interval '1 month') AT TIME ZONE 'UTC';
    legacy timestamptz := (SELECT legacy_until FROM usage_fact_months);
    cut    usage_watermark_cut;
BEGIN
    IF (m AT TIME ZONE 'UTC') < legacy THEN
        name := 'usage_fact_legacy';
        ends := legacy;
    END IF;
    IF ends > now() THEN
        RAISE EXCEPTION 'partition % ends at %, not over yet', name, ends
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT * INTO cut FROM usage_watermark_cut;
    IF cut.through < ends OR NOT cut.published THEN
        RAISE EXCEPTION 'usage''s watermark cut (%, published %) has not passed %, the end of partition %',
            cut.through, cut.published, ends, name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits
                   WHERE inhparent = 'usage_fact'::regclass AND inhrelid = to_regclass(quote_ident(name))) THEN
        RAISE EXCEPTION 'usage_fact has no partition %', name USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format('ALTER TABLE usage_fact DETACH PARTITION %I', name);
    RETURN name;
END $$;
-- Archiving is the owner's (an operator's), not the runtime role's.
REVOKE EXECUTE ON FUNCTION usage_fact_archive(timestamptz) FROM PUBLIC;
