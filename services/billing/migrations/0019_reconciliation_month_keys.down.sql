CREATE INDEX charge_off_month_period_idx ON charge (tenant_id, period)
    WHERE late OR make_timestamp(substr(period, 1, 4)::int, substr(period, 6, 2)::int, 1, 0, 0, 0)
                  <> date_trunc('month', occurred_at AT TIME ZONE 'UTC');
-- Its index on the first partition under the name migration 0018 gave the
-- indexes it found there, which its down migration renames back when the
-- first partition becomes charge again.
DO $$
DECLARE
    n text;
BEGIN
    SELECT c.relname INTO n
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_index x ON x.indexrelid = c.oid
    WHERE i.inhparent = 'charge_off_month_period_idx'::regclass AND x.indrelid = 'charge_legacy'::regclass;
    IF n IS NOT NULL THEN
        EXECUTE format('ALTER INDEX %I RENAME TO %I', n, 'legacy_charge_off_month_period_idx');
    END IF;
END $$;
DROP INDEX charge_off_month_month_period_idx;
DROP INDEX charge_off_month_period_month_idx;
