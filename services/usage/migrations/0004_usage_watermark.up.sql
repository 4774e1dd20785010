-- The acceptance cut behind usage's watermarks (UsageAcceptedThrough,
-- decision 0014): one row. Every accepting transaction holds the acceptance
-- lock shared and takes an acceptance time at or after through; the
-- publisher moves the cut under the lock held exclusively, so every fact
-- accepted before through has committed when the cut commits, with its
-- UsageAccepted at an outbox id at or below outbox_through. published: the
-- cut's watermarks are in the outbox (appended once every such
-- UsageAccepted was acknowledged by the broker).
CREATE TABLE usage_watermark_cut (
    one            boolean     PRIMARY KEY DEFAULT true CHECK (one),
    through        timestamptz NOT NULL,
    outbox_through bigint      NOT NULL,
    published      boolean     NOT NULL,
    cut_at         timestamptz NOT NULL DEFAULT now()
);
INSERT INTO usage_watermark_cut (through, outbox_through, published)
VALUES ('1970-01-01T00:00:00Z', 0, true);
