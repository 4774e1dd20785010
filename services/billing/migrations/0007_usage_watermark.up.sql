-- Usage's watermarks as billing applied them (UsageAcceptedThrough,
-- decision 0014): per partition of usage.events.v1, the highest through
-- applied (never lowered), and how many partitions the topic had then.
CREATE TABLE usage_watermark (
    partition  integer     PRIMARY KEY CHECK (partition >= 0),
    partitions integer     NOT NULL CHECK (partitions > partition),
    through    timestamptz NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- A requested close: the period stays open (its usage still rated into it)
-- until every partition's watermark is at or after close_requested_at and
-- none of its usage waits in the inbox; then the close's step 1 runs.
ALTER TABLE billing_period ADD COLUMN close_requested_at timestamptz;
ALTER TABLE billing_period ADD COLUMN close_requested_by text;
CREATE INDEX billing_period_close_requested_idx ON billing_period (tenant_id, period)
    WHERE status = 'open' AND close_requested_at IS NOT NULL;
