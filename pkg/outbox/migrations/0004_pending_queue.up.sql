-- Pending rows listed in a narrow table of their own, outbox_pending, instead
-- of a mark on each row (decision 0027). The relay deleted nothing and
-- updated every row it sent: UPDATE outbox_event SET published_at wrote a
-- second version of the row, envelope and all, with new entries in its
-- primary key and the published index (never a HOT update: the pending and
-- published indexes name published_at), and left a dead row for vacuum; a
-- tenth of PostgreSQL's execution time and a fifth of its WAL at 1,500
-- facts/s (docs/cpu-per-fact.md). Now an append inserts the row and its
-- (shard, id, event_id) into outbox_pending in one statement; the relay
-- claims from outbox_pending, sends, and deletes the entries of the rows the
-- broker acknowledged. outbox_event's rows are written once and never updated
-- but by a failed send (attempts, dead_at) or a redrive.
--
-- A row is pending while it has an entry in outbox_pending, a dead letter
-- while dead_at is set (its entry deleted), sent otherwise. published_at goes:
-- a sent row is kept RELAY_RETENTION from its creation (created_at) rather
-- than from its send.
--
-- No downtime beyond the migration's own locks: the pending rows (the
-- backlog, not the table) are copied into outbox_pending; the sent rows of
-- the default partition, which is purged row by row, get an index on
-- created_at, the day partitions none (they are dropped whole).
CREATE TABLE outbox_pending (
    shard    smallint NOT NULL,
    id       bigint   NOT NULL,
    event_id uuid     NOT NULL,
    -- The claim reads a shard's oldest entries in this order; event_id in
    -- the index too, so that the read is one index range, not the table.
    PRIMARY KEY (shard, id) INCLUDE (event_id)
);
-- A queue: every entry is deleted within seconds of its insert. Vacuum it
-- as soon as dead entries pile up, whatever its size.
ALTER TABLE outbox_pending SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
                                autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000);

INSERT INTO outbox_pending (shard, id, event_id)
SELECT shard, id, event_id FROM outbox_event WHERE published_at IS NULL AND dead_at IS NULL;

DROP INDEX outbox_event_pending;
DROP INDEX outbox_event_published;
ALTER TABLE outbox_event DROP COLUMN published_at;
CREATE INDEX outbox_event_default_created ON outbox_event_default (created_at);
