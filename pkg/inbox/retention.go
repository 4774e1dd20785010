package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention
//
// inbox_event is what makes a redelivery a DUPLICATE, so a row must outlive
// every copy of its event that can still be delivered: a topic keeps a
// message for its retention (Kafka's default, 7 days, which the topics here
// keep: none sets retention.ms), so the inbox keeps a decided event for
// longer (INBOX_RETENTION, 14 days by default; raise it with the topics').
// Past that, DropParts drops the weeks of inbox_event whose rows are all
// that old, and PurgeDefault deletes the rows of its default partition in
// small batches (see months.go; PurgeEvents deletes from every partition);
// PurgeRedriven deletes the quarantine rows redriven as long ago. Two kinds
// of row are kept whatever their age:
//
//   - the newest applied version of each aggregate of a type listed in
//     keepNewest (price series, invoices): the gap check of the next
//     version, which may come months later, reads it;
//   - nothing else: a usage fact, a charge or an adjustment is version 1 of
//     an aggregate of its own, and what guards its effect past the inbox's
//     retention is the effect's own unique constraint on its origin event
//     (Options.OriginConstraints), which a redrive of an old copy meets.
//
// Deferred events wait for a predecessor or a fact; one that waited longer
// than the maximum age (DEFERRED_MAX_AGE) will most likely never be applied
// by waiting, so ExpireDeferred moves it to the quarantine as
// ReasonDeferredExpired, where an operator sees it and redrives it (which
// decides it again: applied, or deferred anew with a fresh age).

// PurgeEvents deletes up to limit inbox_event rows decided before olderThan,
// keeping the newest version of each aggregate of the keepNewest types, and
// returns how many it deleted. Call it again while it returns limit.
func PurgeEvents(ctx context.Context, pool *pgxpool.Pool, olderThan time.Time, keepNewest []string, limit int) (int64, error) {
	return purgeEvents(ctx, pool, "inbox_event", olderThan, keepNewest, limit)
}

// PurgeDefault is PurgeEvents on the rows of inbox_event's default partition
// only (see months.go): the weeks are dropped whole by DropParts.
func PurgeDefault(ctx context.Context, pool *pgxpool.Pool, olderThan time.Time, keepNewest []string, limit int) (int64, error) {
	return purgeEvents(ctx, pool, EventParts.Default(), olderThan, keepNewest, limit)
}

func purgeEvents(ctx context.Context, pool *pgxpool.Pool, table string, olderThan time.Time, keepNewest []string, limit int) (int64, error) {
	if keepNewest == nil {
		keepNewest = []string{}
	}
	tag, err := pool.Exec(ctx, `
		DELETE FROM inbox_event WHERE event_id IN (
			SELECT e.event_id FROM `+table+` e
			WHERE e.applied_at < $1
			  AND NOT (e.aggregate_type = ANY($2::text[]) AND NOT EXISTS (
			      SELECT 1 FROM inbox_event n
			      WHERE n.tenant_id = e.tenant_id AND n.aggregate_type = e.aggregate_type
			        AND n.aggregate_id = e.aggregate_id AND n.aggregate_version > e.aggregate_version))
			LIMIT $3
			FOR UPDATE SKIP LOCKED)`, olderThan, keepNewest, limit)
	if err != nil {
		return 0, fmt.Errorf("purge inbox events: %w", err)
	}
	return tag.RowsAffected(), nil
}

// PurgeRedriven deletes up to limit quarantine rows redriven before
// olderThan and returns how many it deleted. A row still quarantined is
// never purged, whatever its age: it waits for an operator. A redriven
// one has done its work (the event was decided again; the redrive's audit
// is query's), and by then the inbox has forgotten the event too.
func PurgeRedriven(ctx context.Context, pool *pgxpool.Pool, olderThan time.Time, limit int) (int64, error) {
	tag, err := pool.Exec(ctx, `
		DELETE FROM inbox_quarantine WHERE id IN (
			SELECT id FROM inbox_quarantine WHERE state = 'redriven' AND redriven_at < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, olderThan, limit)
	if err != nil {
		return 0, fmt.Errorf("purge redriven quarantine rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ExpireDeferred quarantines up to limit deferred events first seen before
// olderThan, as ReasonDeferredExpired, in one transaction: each leaves
// inbox_deferred and gets a quarantine row (announced through
// Options.OnQuarantine like any other). It returns how many it expired.
func (ib *Inbox) ExpireDeferred(ctx context.Context, pool *pgxpool.Pool, olderThan time.Time, limit int) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT event_id, raw, topic, partition, "offset", wait_key, first_seen FROM inbox_deferred
			WHERE first_seen < $1 ORDER BY first_seen LIMIT $2 FOR UPDATE SKIP LOCKED`, olderThan, limit)
		if err != nil {
			return err
		}
		type expired struct {
			id      [16]byte
			m       Message
			waitKey string
			since   time.Time
		}
		list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (expired, error) {
			var x expired
			err := row.Scan(&x.id, &x.m.Raw, &x.m.Topic, &x.m.Partition, &x.m.Offset, &x.waitKey, &x.since)
			return x, err
		})
		if err != nil || len(list) == 0 {
			return err
		}
		p := &pending{}
		ids := make([][16]byte, len(list))
		for i, x := range list {
			ids[i] = x.id
			p.quarantines = append(p.quarantines, quarantine{it: ib.newItem(x.m, false), reason: ReasonDeferredExpired,
				detail: fmt.Sprintf("deferred since %s waiting for %s", x.since.UTC().Format(time.RFC3339), x.waitKey)})
		}
		if _, err := tx.Exec(ctx, `DELETE FROM inbox_deferred WHERE event_id = ANY($1::uuid[])`, ids); err != nil {
			return err
		}
		if _, err := ib.write(ctx, tx, p, false); err != nil {
			return err
		}
		n = len(list)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("expire deferred events: %w", err)
	}
	if n > 0 {
		ib.metrics.deferredExpired.Add(float64(n))
		ib.log.WarnContext(ctx, "deferred events expired into the quarantine", "count", n, "reason", ReasonDeferredExpired)
	}
	return n, nil
}

// CountPurged adds n to inbox_events_purged_total.
func (ib *Inbox) CountPurged(n int64) { ib.metrics.purged.Add(float64(n)) }
