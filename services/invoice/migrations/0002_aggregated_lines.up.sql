-- Bounded, aggregated invoices. Each ChargeRated is now an invoice_charge
-- row, written by its consumer alone (no row shared with the tenant's other
-- charges); the invoice's charge lines, one per meter and price version, are
-- materialised from those rows when the close issues the invoice, and
-- computed live while it is open. Issued invoices get a gap-free number per
-- tenant.
--
-- 0001's charge lines (one per ChargeRated) carry no meter or price version,
-- so they cannot be aggregated: this migration refuses to run over a
-- database that holds invoices. Rebuild such a database from billing's
-- events (a fresh database and a consumer group reset).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM invoice) THEN
        RAISE EXCEPTION 'invoice 0002 needs an invoice database without invoices: 0001''s per-charge lines cannot be aggregated; rebuild it from billing.events.v1';
    END IF;
END
$$;

-- The charges of the tenants' invoices: one row per ChargeRated (its event
-- id is the origin), never updated. The invoice it belongs to is the one of
-- (tenant_id, period, currency), created by the same statement that inserts
-- the charge; there is no foreign key, whose check would lock the invoice
-- row that every charge of the invoice shares.
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
    CONSTRAINT invoice_charge_origin_key PRIMARY KEY (origin_event_id)
);
-- The close's tally and the charge lines group by these, in this order.
CREATE INDEX invoice_charge_line_idx
    ON invoice_charge (tenant_id, period, currency, meter_code, price_version, unit_price);

CREATE TRIGGER invoice_charge_immutable BEFORE UPDATE OR DELETE ON invoice_charge
    FOR EACH ROW EXECUTE FUNCTION invoice_refuse_change();

-- Lines are aggregates now: a charge line per (meter, price version) has no
-- origin event of its own; it counts the invoice_charge rows of its key.
-- Adjustment and rounding lines keep their origin event.
ALTER TABLE invoice_line
    ALTER COLUMN origin_event_id DROP NOT NULL,
    ADD COLUMN meter_code    text,
    ADD COLUMN price_version bigint,
    ADD COLUMN unit_price    numeric,
    ADD COLUMN quantity      numeric,
    ADD COLUMN charge_count  bigint,
    ADD CONSTRAINT invoice_line_shape_check CHECK (CASE WHEN kind = 'charge'
        THEN origin_event_id IS NULL AND meter_code IS NOT NULL AND price_version IS NOT NULL
             AND unit_price IS NOT NULL AND quantity IS NOT NULL AND charge_count >= 1
        ELSE origin_event_id IS NOT NULL AND meter_code IS NULL AND price_version IS NULL
             AND unit_price IS NULL AND quantity IS NULL AND charge_count IS NULL
        END);
CREATE UNIQUE INDEX invoice_line_charge_key ON invoice_line (invoice_id, meter_code, price_version)
    WHERE kind = 'charge';

-- Gap-free invoice numbers: one counter row per tenant, taken (incremented)
-- by the transaction that issues the invoice, so a number exists only if its
-- invoice does.
CREATE TABLE invoice_number_counter (
    tenant_id   text   PRIMARY KEY,
    last_number bigint NOT NULL,
    CONSTRAINT invoice_number_counter_check CHECK (last_number >= 1)
);

ALTER TABLE invoice
    ADD COLUMN number bigint,
    ADD CONSTRAINT invoice_number_key UNIQUE (tenant_id, number),
    ADD CONSTRAINT invoice_number_check CHECK ((status = 'issued') = (number IS NOT NULL));
