-- The pricing of each price version invoice has charges of under another
-- model than unit (graduated, volume, package: package pricing's JSON),
-- from the ChargeRated events that carry it. Such charges have no amount of
-- their own: at issue a charge line's amount is its version's pricing over
-- the line's quantity. A version's pricing never changes, so the first
-- ChargeRated that brings it writes it and the others find it.
CREATE TABLE invoice_price_version (
    tenant_id     text   NOT NULL,
    currency      text   NOT NULL,
    meter_code    text   NOT NULL,
    price_version bigint NOT NULL,
    pricing       jsonb  NOT NULL,
    PRIMARY KEY (tenant_id, currency, meter_code, price_version)
);
