-- Back to a mark on each row: a row with an entry in outbox_pending is
-- pending again, a dead letter stays one, every other row is marked
-- published at its creation (its send time was not kept).
DROP INDEX outbox_event_default_created;
ALTER TABLE outbox_event ADD COLUMN published_at timestamptz;
UPDATE outbox_event e SET published_at = e.created_at
WHERE e.dead_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.shard = e.shard AND p.id = e.id);
CREATE INDEX outbox_event_pending ON outbox_event (shard, id)
    WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_event_published ON outbox_event (published_at)
    WHERE published_at IS NOT NULL;
DROP TABLE outbox_pending;
