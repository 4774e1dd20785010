-- invoice_charge is partitioned by month of its origin event id (the
-- ChargeRated's UUIDv7 event id, minted by billing when it rated the fact,
-- checked by the envelope), so a month whose invoices are all issued is
-- archived whole (detached, dumped, dropped) instead of its rows deleted
-- (decision 0025, facts by month). The primary key on origin_event_id stays
-- global, as before: the key is the partition key, so a redelivered
-- ChargeRated meets its own row in its own month and is a duplicate however
-- late it comes.
--
-- No downtime, in one migration of catalog changes only (the layout of
-- decision 0024, the outbox and the inbox by month): the table as it is
-- becomes the DEFAULT partition, which takes every id outside the month
-- partitions (the charges before the migration, ids of a clock far ahead or
-- of a month with no partition); attaching a default to a table with no
-- other partition reads none of its rows, and its primary key and indexes
-- are the ones the parent's match, attached, not built. The month
-- partitions are created by the service's upkeep (pkg/monthpart, from the
-- month after the last row the default holds).
DROP TRIGGER invoice_charge_immutable ON invoice_charge;
ALTER TABLE invoice_charge RENAME TO invoice_charge_default;
ALTER TABLE invoice_charge_default RENAME CONSTRAINT invoice_charge_origin_key TO invoice_charge_default_origin_key;
ALTER INDEX invoice_charge_line_idx RENAME TO invoice_charge_default_line_idx;
ALTER INDEX invoice_charge_reconciliation_idx RENAME TO invoice_charge_default_reconciliation_idx;

-- The columns in the order the old table has them (0002, 0006, 0008): the
-- upkeep moves rows between the default and a month by SELECT *.
CREATE TABLE invoice_charge (
    origin_event_id uuid        NOT NULL,
    charge_id       uuid        NOT NULL,
    tenant_id       text        NOT NULL,
    period          text        NOT NULL,
    currency        text        NOT NULL,
    meter_code      text        NOT NULL,
    price_version   bigint      NOT NULL,
    unit_price      numeric     NOT NULL,
    quantity        numeric     NOT NULL,
    amount          numeric     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    usage_event_id  uuid        NOT NULL,
    aggregation     text        NOT NULL DEFAULT 'sum',
    dimensions_key  text        COLLATE "C" NOT NULL DEFAULT '',
    unpriced        boolean     NOT NULL DEFAULT false,
    CONSTRAINT invoice_charge_origin_key PRIMARY KEY (origin_event_id)
) PARTITION BY RANGE (origin_event_id);
CREATE INDEX invoice_charge_line_idx
    ON invoice_charge (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced, unit_price);
CREATE INDEX invoice_charge_reconciliation_idx ON invoice_charge (tenant_id, period, usage_event_id, origin_event_id);

ALTER TABLE invoice_charge ATTACH PARTITION invoice_charge_default DEFAULT;

-- On the parent, cloned onto every partition, the default and each month
-- the upkeep creates.
CREATE TRIGGER invoice_charge_immutable BEFORE UPDATE OR DELETE ON invoice_charge
    FOR EACH ROW EXECUTE FUNCTION invoice_refuse_change();

-- The upkeep's DDL for the runtime role (pkg/monthpart's shared body):
-- creating a month ahead, and the default's CHECK that spares the creation
-- its scan. Detaching or dropping a month is not the runtime role's: it is
-- invoice_charge_archive's, below.
CREATE FUNCTION invoice_charge_months(op text, month text, lo uuid DEFAULT NULL, hi uuid DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF op NOT IN ('create', 'add_check', 'validate_check', 'drop_check') THEN
        RAISE EXCEPTION 'operation % is not the upkeep''s', op;
    END IF;
    PERFORM monthpart_ddl('invoice_charge', 'origin_event_id', op, month, lo, hi, NULL);
END $$;

-- The months archived: a ChargeRated redelivered after its month left is a
-- duplicate of the row that was archived, as it was while the row was here
-- (AddCharges reads this beside invoice_charge).
CREATE TABLE invoice_charge_archived (
    partition   text        PRIMARY KEY,
    lo          uuid        NOT NULL,
    hi          uuid        NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now()
);

-- The smallest UUIDv7 of instant t: its Unix milliseconds, then zeros (a
-- month's bounds, as pkg/monthpart's Bound).
CREATE FUNCTION invoice_uuid7_floor(t timestamptz) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT
    RETURN (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid;

-- invoice_charge_archive(t) detaches the month partition of t (UTC) and
-- returns its name, for the operator to dump (pg_dump -t) and drop. It
-- refuses (SQLSTATE 55000) a month not over, or holding a charge whose
-- invoice is not issued: an open invoice's close still reads its charges.
CREATE FUNCTION invoice_charge_archive(t timestamptz) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m    timestamp   := date_trunc('month', t AT TIME ZONE 'UTC');
    name text        := 'invoice_charge_p' || to_char(m, 'YYYYMM');
    ends timestamptz := (m + interval '1 month') AT TIME ZONE 'UTC';
    open boolean;
BEGIN
    IF ends > now() THEN
        RAISE EXCEPTION 'partition % ends at %, not over yet', name, ends
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits
                   WHERE inhparent = 'invoice_charge'::regclass AND inhrelid = to_regclass(quote_ident(name))) THEN
        RAISE EXCEPTION 'invoice_charge has no partition %', name USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I c WHERE NOT EXISTS (
                        SELECT 1 FROM invoice i
                        WHERE i.tenant_id = c.tenant_id AND i.period = c.period AND i.currency = c.currency
                          AND i.status = ''issued''))', name)
        INTO open;
    IF open THEN
        RAISE EXCEPTION 'partition % holds charges of invoices not issued', name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO invoice_charge_archived (partition, lo, hi)
    VALUES (name, invoice_uuid7_floor(m AT TIME ZONE 'UTC'), invoice_uuid7_floor(ends));
    EXECUTE format('ALTER TABLE invoice_charge DETACH PARTITION %I', name);
    RETURN name;
END $$;
-- Archiving is the owner's (an operator's), not the runtime role's.
REVOKE EXECUTE ON FUNCTION invoice_charge_archive(timestamptz) FROM PUBLIC;
