-- The per-series schedule is not rebuilt: every series is known through
-- nothing until meter publishes a series watermark again.
CREATE TABLE IF NOT EXISTS price_schedule (
    tenant_id     text        NOT NULL,
    meter_code    text        NOT NULL,
    currency      text        NOT NULL,
    known_through timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, meter_code, currency)
);
DROP TABLE IF EXISTS schedule_seq;
DROP TABLE IF EXISTS schedule_shard;
