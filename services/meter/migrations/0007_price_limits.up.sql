-- The bounds of a tenant's prices that bound its periods' lines (decision
-- 0014, "A period's lines are bounded by the tenant's prices"): a line is a
-- meter, currency, price version and dimension set, so a period has at most
-- one line per price entry (a series' dimension set, the default's {}
-- included) in effect at its start plus one per version taking effect in
-- it. price_entry holds each entry once (METER_MAX_PRICE_ENTRIES counts
-- them); price_tenant_effective counts a tenant's versions taking effect in
-- a month (METER_MAX_PRICE_VERSIONS_PER_MONTH) without reading the others.
CREATE TABLE price_entry (
    tenant_id  text  NOT NULL,
    meter_code text  NOT NULL,
    currency   text  NOT NULL,
    dimensions jsonb NOT NULL CHECK (jsonb_typeof(dimensions) = 'object'),
    PRIMARY KEY (tenant_id, meter_code, currency, dimensions)
);

INSERT INTO price_entry (tenant_id, meter_code, currency, dimensions)
SELECT DISTINCT tenant_id, meter_code, currency, dimensions FROM price;

CREATE INDEX price_tenant_effective ON price (tenant_id, effective_at);
