-- Each week's aggregate slot leads with the aggregate id. The slot is unique
-- on the same four columns in any order, and every lookup names all four (the
-- purge ranges over the version, which stays last). With the tenant first, a
-- week's slot index had one place of insertion per tenant: with 100 tenants
-- each insert descended from the root and each split left two half-full
-- pages. The events that come once per fact name aggregates whose ids are
-- UUIDv7s (usage facts, charges), so with the id first the index grows at its
-- right end whatever the tenants (docs/cpu-per-fact.md, "Step 20").
--
-- No downtime: the partitions that exist keep their slot as it is; the weeks
-- created from now on get the new one.
CREATE OR REPLACE FUNCTION inbox_event_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT
BEGIN ATOMIC
    SELECT monthpart_ddl('inbox_event', 'event_id', op, month, lo, hi,
                         'aggregate_id, aggregate_type, tenant_id, aggregate_version');
END;
