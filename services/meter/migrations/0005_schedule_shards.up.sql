-- The price schedule is proven per shard of tenants (decision 0019), not
-- per series: one watermark per shard, however many series exist, and a
-- tenant without any series is proven too (its facts are rated unpriced).
-- known_through: every activation of the shard's tenants taking effect at
-- or before it is committed (NULL: nothing published yet); last_seq: the
-- shard's activations are numbered 1, 2, ... in commit order, under the
-- shard's row lock. The shards start known through the latest watermark
-- any series published, so no promise already made is broken.
CREATE TABLE schedule_shard (
    shard         integer     PRIMARY KEY CHECK (shard >= 0),
    last_seq      bigint      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    known_through timestamptz
);
INSERT INTO schedule_shard (shard, known_through)
SELECT g, (SELECT max(known_through) FROM price_series)
FROM generate_series(0, 15) g;

-- A version's place in its shard (NULL for versions from before the shards).
ALTER TABLE price ADD COLUMN schedule_seq bigint;

DROP INDEX IF EXISTS price_series_known_through;
ALTER TABLE price_series DROP COLUMN IF EXISTS known_through;
