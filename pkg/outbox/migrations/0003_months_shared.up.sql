-- outbox_event's month upkeep through the one body every table partitioned
-- by month uses (pkg/monthpart's migrations, monthpart_ddl), with the table
-- and its key fixed here. Same operations, same names, same checks as
-- before.
CREATE OR REPLACE FUNCTION outbox_event_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT
BEGIN ATOMIC
    SELECT monthpart_ddl('outbox_event', 'event_id', op, month, lo, hi, NULL);
END;
