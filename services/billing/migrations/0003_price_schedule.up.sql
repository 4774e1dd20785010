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
