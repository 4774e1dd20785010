-- Weeks created from now on get the slot led by the tenant again (0006's);
-- those created meanwhile keep theirs.
CREATE OR REPLACE FUNCTION inbox_event_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT
BEGIN ATOMIC
    SELECT monthpart_ddl('inbox_event', 'event_id', op, month, lo, hi,
                         'tenant_id, aggregate_type, aggregate_id, aggregate_version');
END;
