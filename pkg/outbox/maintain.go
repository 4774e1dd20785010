package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what the read and maintenance functions need: a pool, a
// connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Stats describes an outbox backlog.
type Stats struct {
	Pending          int64
	OldestPendingAge time.Duration
	MaxPendingPerKey int64
	DeadLetters      int64
}

// statsHead is how many of each shard's oldest pending rows ReadStats groups
// by key for MaxPendingPerKey.
const statsHead = 1000

// StatsCountCap bounds the counts ReadStats makes, pending rows and dead
// letters: a larger backlog reads as StatsCountCap. Counting is a scan of
// an index (with heap visits for rows not yet all-visible), so an exact
// count of a backlog of hundreds of thousands took seconds, every refresh,
// while the relay drained it (5.8 s at 100,000 on a loaded machine): a
// count of StatsCountCap costs what a close's chunk of as many charges
// does. The gauges are for alerting on a growing backlog, which the
// oldest pending age shows past the cap.
const StatsCountCap = 10_000

// ReadStats reads the backlog of the outbox. Its cost must not grow with the
// backlog it measures (the relay refreshes it while it drains one): Pending
// and DeadLetters are counted up to StatsCountCap, the oldest pending age is read from the
// head of each shard's pending index, and MaxPendingPerKey counts among the
// oldest statsHead pending rows of each shard (a hot key crowds its shard's
// head, so it still shows).
func ReadStats(ctx context.Context, q Querier) (Stats, error) {
	var s Stats
	var age float64
	err := q.QueryRow(ctx, statsQuery, statsHead, StatsCountCap).
		Scan(&s.Pending, &age, &s.MaxPendingPerKey, &s.DeadLetters)
	if err != nil {
		return Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	s.OldestPendingAge = time.Duration(age * float64(time.Second))
	return s, nil
}

// statsQuery is ReadStats's statement. The pending rows are read from
// outbox_pending in the order of its key, shard by shard (their rows'
// creation times and keys by the rows' primary key, one probe per entry as
// in ClaimStatement, never a join over the table), the dead letters in
// the order of their partial index, so that the indexes are the plan: as an
// EXISTS or count over the table a day's partition not yet analyzed was
// read whole by a Seq Scan at each refresh (TestStatsReadNoPublishedRow).
const statsQuery = `
		SELECT
		  (SELECT count(*) FROM (SELECT 1 FROM outbox_pending ORDER BY shard, id LIMIT $2) p),
		  COALESCE((SELECT extract(epoch FROM now() - min(e.created_at))::float8
		            FROM outbox_shard o CROSS JOIN LATERAL (
		                SELECT p.event_id FROM outbox_pending p WHERE p.shard = o.shard
		                ORDER BY p.id LIMIT 1) h
		            CROSS JOIN LATERAL (SELECT created_at FROM outbox_event e WHERE e.event_id = h.event_id LIMIT 1) e), 0),
		  COALESCE((SELECT max(c) FROM (
		                SELECT count(*) AS c
		                FROM outbox_shard o CROSS JOIN LATERAL (
		                    SELECT p.event_id FROM outbox_pending p WHERE p.shard = o.shard
		                    ORDER BY p.id LIMIT $1) h
		                CROSS JOIN LATERAL (SELECT partition_key FROM outbox_event e WHERE e.event_id = h.event_id LIMIT 1) e
		                GROUP BY e.partition_key) k), 0),
		  (SELECT count(*) FROM (SELECT 1 FROM outbox_event WHERE dead_at IS NOT NULL
		                         ORDER BY id LIMIT $2) d)`

// DeadLetter is an outbox row that exhausted its attempts.
type DeadLetter struct {
	ID        int64
	EventID   uuid.UUID
	EventType string
	Topic     string
	Attempts  int
	LastError string
	CreatedAt time.Time
	DeadAt    time.Time
}

// ListDeadLetters returns up to limit dead letters with id > after, oldest first.
func ListDeadLetters(ctx context.Context, q Querier, after int64, limit int) ([]DeadLetter, error) {
	rows, err := q.Query(ctx, `
		SELECT id, event_id, event_type, topic, attempts, COALESCE(last_error, ''), created_at, dead_at
		FROM outbox_event WHERE dead_at IS NOT NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DeadLetter])
	if err != nil {
		return nil, fmt.Errorf("list outbox dead letters: %w", err)
	}
	return out, nil
}

// RedriveDeadLetter gives a dead letter a fresh set of attempts: it is
// pending again, in its place in its shard's order (its entry kept if a
// dead letter made by hand still had one). It reports whether the event was
// a dead letter. The caller audits the redrive.
func RedriveDeadLetter(ctx context.Context, q Querier, eventID uuid.UUID) (bool, error) {
	var n int
	err := q.QueryRow(ctx, `
		WITH r AS (
			UPDATE outbox_event SET dead_at = NULL, attempts = 0
			WHERE event_id = $1 AND dead_at IS NOT NULL
			RETURNING shard, id, event_id
		), p AS (
			INSERT INTO outbox_pending (shard, id, event_id) SELECT shard, id, event_id FROM r
			ON CONFLICT DO NOTHING
		)
		SELECT count(*) FROM r`, eventID).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("redrive outbox dead letter %s: %w", eventID, err)
	}
	return n == 1, nil
}

// Purge deletes sent rows created more than retention ago, batch rows per
// statement so that no statement holds many locks or a long transaction. Dead
// letters and pending rows are never purged. It returns the rows deleted.
func Purge(ctx context.Context, q Querier, retention time.Duration, batch int) (int64, error) {
	return purge(ctx, q, "outbox_event", retention, batch)
}

// PurgeDefault is Purge on the rows of outbox_event's default partition only
// (see months.go), through its index on created_at: the days are dropped
// whole by DropParts.
func PurgeDefault(ctx context.Context, q Querier, retention time.Duration, batch int) (int64, error) {
	return purge(ctx, q, EventParts.Default(), retention, batch)
}

func purge(ctx context.Context, q Querier, table string, retention time.Duration, batch int) (int64, error) {
	var total int64
	for {
		tag, err := q.Exec(ctx, `
			DELETE FROM outbox_event WHERE event_id IN (
				SELECT e.event_id FROM `+table+` e
				WHERE e.created_at < now() - $1::interval AND e.dead_at IS NULL
				  AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.shard = e.shard AND p.id = e.id)
				ORDER BY e.created_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, retention, batch)
		if err != nil {
			return total, fmt.Errorf("purge sent outbox rows: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) || ctx.Err() != nil {
			return total, nil
		}
	}
}

// purge keeps the days of outbox_event (see months.go) and deletes the
// sent rows of its default partition past the retention.
func (r *Relay) purge(ctx context.Context) {
	created, err := EnsureParts(ctx, r.pool, time.Now())
	if err != nil && ctx.Err() == nil {
		r.log.Warn("create outbox days; rows of a day without a partition go to the default one", "err", err)
	}
	if len(created) > 0 {
		r.log.Info("created outbox days", "partitions", created)
	}
	d, err := DropParts(ctx, r.pool, time.Now(), r.cfg.Retention)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("drop outbox days", "err", err)
	}
	if len(d.Parts) > 0 {
		r.log.Info("dropped outbox days past the retention", "partitions", d.Parts, "rows", d.Rows, "retention", r.cfg.Retention)
	}
	if len(d.Held) > 0 {
		r.log.Warn("outbox days past the retention kept: they hold pending rows or dead letters", "partitions", d.Held)
	}
	n, err := PurgeDefault(ctx, r.pool, r.cfg.Retention, r.cfg.PurgeBatch)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("purge outbox", "err", err)
	}
	if n > 0 {
		r.log.Info("purged sent outbox rows", "rows", n, "retention", r.cfg.Retention)
	}
}

func (r *Relay) refreshStats(ctx context.Context) {
	s, err := ReadStats(ctx, r.pool)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("refresh outbox stats", "err", err)
		}
		return
	}
	r.metrics.pending.Set(float64(s.Pending))
	r.metrics.oldestAge.Set(s.OldestPendingAge.Seconds())
	r.metrics.maxPerKey.Set(float64(s.MaxPendingPerKey))
	r.metrics.deadLetters.Set(float64(s.DeadLetters))
}
