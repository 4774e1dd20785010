-- projected_event_archive as 0010 made it: the events' month alone.
DROP FUNCTION projected_event_archive(timestamptz);
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
DROP TABLE usage_fact_archived;
DROP FUNCTION usage_fact_months(text, text, uuid, uuid);
-- The facts back in one table (LIKE keeps the columns' collations).
CREATE TABLE usage_fact_flat (LIKE usage_fact INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
INSERT INTO usage_fact_flat SELECT * FROM usage_fact;
DROP TABLE usage_fact;
ALTER TABLE usage_fact_flat RENAME TO usage_fact;
ALTER TABLE usage_fact ADD CONSTRAINT usage_fact_pkey PRIMARY KEY (tenant_id, source_system, source_event_id);
CREATE INDEX usage_fact_window ON usage_fact (tenant_id, meter_code, occurred_at)
    INCLUDE (value, dims, quantity);
CREATE INDEX usage_fact_unrolled ON usage_fact (meter_code) WHERE dims IS NULL;
