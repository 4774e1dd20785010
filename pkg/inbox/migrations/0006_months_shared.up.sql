-- inbox_event's month upkeep through the one body every table partitioned
-- by month uses (pkg/monthpart's migrations, monthpart_ddl), with the table,
-- its key and the per-month aggregate slot fixed here. Same operations,
-- same names, same checks as before.
CREATE OR REPLACE FUNCTION inbox_event_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT
BEGIN ATOMIC
    SELECT monthpart_ddl('inbox_event', 'event_id', op, month, lo, hi,
                         'tenant_id, aggregate_type, aggregate_id, aggregate_version');
END;
