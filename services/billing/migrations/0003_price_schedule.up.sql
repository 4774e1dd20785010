-- What billing knows of each price series' schedule (decision 0011): every
-- version taking effect at or before known_through is in price_evidence, so
-- a fact that occurred before known_through can be rated from the evidence.
-- Raised by each PriceActivated (its knownThrough) and each
-- PriceScheduleWatermark whose version billing holds; never lowered. A
-- series without a row is known through nothing: its usage waits.
CREATE TABLE price_schedule (
    tenant_id     text        NOT NULL,
    meter_code    text        NOT NULL,
    currency      text        NOT NULL,
    known_through timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, meter_code, currency)
);

-- Pricing models (DESIGN.md section 3, package pricing): a version's model
-- and its fields, replicated from PriceActivated. unit_price is the unit
-- price under unit pricing and 0 under the others; tiers (graduated,
-- volume) is NULL and package_size and package_price (package) are 0 under
-- the models that have none. Versions already here are unit.
ALTER TABLE price_evidence ADD COLUMN model text NOT NULL DEFAULT 'unit'
    CHECK (model IN ('unit', 'graduated', 'volume', 'package'));
ALTER TABLE price_evidence ADD COLUMN tiers jsonb;
ALTER TABLE price_evidence ADD COLUMN package_size numeric NOT NULL DEFAULT 0;
ALTER TABLE price_evidence ADD COLUMN package_price numeric NOT NULL DEFAULT 0;

-- A charge's model is its version's. Under unit pricing it carries its exact
-- amount (quantity x unit price); under the others unit_price and amount are
-- 0: a version's tiers or packages price the quantity it rated in the
-- period as a whole (the invoice line, the period's estimate), not one
-- charge at a time.
ALTER TABLE charge ADD COLUMN model text NOT NULL DEFAULT 'unit'
    CHECK (model IN ('unit', 'graduated', 'volume', 'package'));
ALTER TABLE charge ADD CONSTRAINT charge_amount_under_unit_only
    CHECK (model = 'unit' OR (unit_price = 0 AND amount = 0));
