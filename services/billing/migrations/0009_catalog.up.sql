-- The meter catalog (DESIGN.md section 3a). meters replicates meter's
-- MeterDefined: a meter's aggregation, the property a unique_count meter
-- counts the distinct values of, and its dimensions. A meter never changes
-- once defined, so a row is written once. Billing rates a fact only once it
-- holds its meter's row (meter publishes a MeterDefined for every meter,
-- those implied by a price included).
CREATE TABLE meters (
    code           text        PRIMARY KEY,
    aggregation    text        NOT NULL CHECK (aggregation IN ('sum', 'count', 'max', 'latest', 'unique_count')),
    value_property text        NOT NULL DEFAULT '',
    dimensions     text[]      NOT NULL DEFAULT '{}',
    event_id       uuid        NOT NULL,
    defined_at     timestamptz NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT meters_event_id_key UNIQUE (event_id)
);

-- A price version's dimensions ({} for the series' default): every version
-- of a series is one entry of its price sheet. dimensions_key is
-- catalog.Key of them with U+0001 for its NUL separator (text holds no NUL;
-- no name or value holds a control character, so the order is Key's): the
-- tie-break of catalog.Choose; dimension_count how many it names (the
-- most specific wins).
ALTER TABLE price_evidence ADD COLUMN dimensions jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(dimensions) = 'object');
ALTER TABLE price_evidence ADD COLUMN dimensions_key text NOT NULL DEFAULT '';
ALTER TABLE price_evidence ADD COLUMN dimension_count smallint NOT NULL DEFAULT 0 CHECK (dimension_count >= 0);

-- What a charge carries of the catalog: its meter's aggregation, the
-- dimensions of the price that rated it (its line's identity with meter,
-- currency and version), the fact's properties, identity (latest's
-- tie-break) and, for unique_count, the value it counts. An unpriced charge
-- (no entry of its series' sheet was in effect at its occurrence) has
-- version 0, no price and no amount: one unpriced line per meter. Charges
-- from before are sum charges without dimensions or properties.
ALTER TABLE charge ADD COLUMN aggregation text NOT NULL DEFAULT 'sum'
    CHECK (aggregation IN ('sum', 'count', 'max', 'latest', 'unique_count'));
ALTER TABLE charge ADD COLUMN dimensions jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(dimensions) = 'object');
ALTER TABLE charge ADD COLUMN dimensions_key text NOT NULL DEFAULT '';
ALTER TABLE charge ADD COLUMN properties jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(properties) = 'object');
ALTER TABLE charge ADD COLUMN source_system text NOT NULL DEFAULT '';
ALTER TABLE charge ADD COLUMN source_event_id text NOT NULL DEFAULT '';
ALTER TABLE charge ADD COLUMN value text NOT NULL DEFAULT '';
ALTER TABLE charge ADD COLUMN unpriced boolean NOT NULL DEFAULT false;

-- A count charge's own amount is its unit price (it counts one); a sum
-- charge's quantity x unit price; the others have none.
ALTER TABLE charge DROP CONSTRAINT charge_amount_exact;
ALTER TABLE charge ADD CONSTRAINT charge_amount_exact
    CHECK (amount = (CASE WHEN aggregation = 'count' THEN 1 ELSE quantity END) * unit_price);
ALTER TABLE charge ADD CONSTRAINT charge_amount_per_charge_only
    CHECK (aggregation IN ('sum', 'count') OR (unit_price = 0 AND amount = 0));
ALTER TABLE charge ADD CONSTRAINT charge_unpriced
    CHECK (unpriced = (price_version = 0) AND (NOT unpriced OR (unit_price = 0 AND amount = 0 AND dimensions = '{}')));
