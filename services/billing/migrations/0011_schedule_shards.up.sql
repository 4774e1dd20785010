-- What billing knows of the price schedule, per shard of tenants (decision
-- 0019), instead of per series: a fact of a tenant in the shard that
-- occurred before known_through can be rated from price_evidence (priced,
-- or unpriced when no version is in effect, whether or not the tenant has
-- a series of its meter). contiguous_seq: billing holds the shard's
-- activations 1 to it, so a watermark naming n <= it is true here.
-- Raised by each PriceActivated and PriceScheduleWatermark once billing
-- holds every activation it names; never lowered. One row per shard of
-- the contract (events.ScheduleShards), known through nothing at first.
CREATE TABLE schedule_shard (
    shard          integer     PRIMARY KEY CHECK (shard >= 0 AND shard < 16),
    contiguous_seq bigint      NOT NULL DEFAULT 0 CHECK (contiguous_seq >= 0),
    known_through  timestamptz NOT NULL DEFAULT 'epoch',
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- The shard's activations billing holds beyond contiguous_seq (they came
-- out of order); deleted once contiguous_seq passes them, so it holds
-- only the activations still waiting for an earlier one.
INSERT INTO schedule_shard (shard) SELECT g FROM generate_series(0, 15) g;

CREATE TABLE schedule_seq (
    shard integer NOT NULL,
    seq   bigint  NOT NULL CHECK (seq >= 1),
    PRIMARY KEY (shard, seq)
);

DROP TABLE price_schedule;
