-- The quantity of each charge line priced as a whole (a price version
-- under graduated, volume or package pricing, decision 0012): the line is
-- (tenant, period, currency, meter, version), as invoice and billing's
-- estimate price it. A ChargeRated of such a version carries no amount of
-- its own; the projection adds its quantity here under the row's lock and
-- records as its "charged" delta what it adds to the line's price, so the
-- summary's charged is the lines' prices exactly (ChargeRated carries the
-- version's pricing).
CREATE TABLE charge_line (
    tenant_id     text    NOT NULL,
    period        text    NOT NULL,
    currency      text    NOT NULL,
    meter_code    text    NOT NULL,
    price_version bigint  NOT NULL,
    quantity      numeric NOT NULL CHECK (quantity >= 0),
    PRIMARY KEY (tenant_id, period, currency, meter_code, price_version)
);
