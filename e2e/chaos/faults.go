package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/outbox"
)

// RelayHold keeps a service's outbox relay in the window between the
// broker's acknowledgement and the mark: the suite holds row locks on the
// pending entries of outbox rows (outbox_pending), so the relay claims the
// rows (its claim is a plain read), sends them, gets the broker's ack, and
// then its mark (DELETE FROM outbox_pending, outbox.SentStatement) waits on
// those locks. Killing the service then is a crash between ack and mark,
// every time, not by luck of timing.
//
// A backend blocked on a lock does not read its socket, so PostgreSQL
// would finish the dead relay's mark once the locks go; a crash "between
// ack and mark" is one whose mark never reached the database, so Abort
// ends that backend (pg_terminate_backend) before the locks are released.
type RelayHold struct {
	conn *pgx.Conn
	tx   pgx.Tx
	pool *pgxpool.Pool
	// Events are the event ids of the rows whose pending entries are
	// locked; Marks the pids of the relay backends whose mark waits on them.
	Events []string
	Marks  []int32
}

// HoldRelayAfterAck returns once the relay of the database at dbURL is
// waiting to mark rows the broker has acknowledged. poke, when set, is
// called now and then to make pending rows (meter writes its outbox only
// when a price is activated). It gives up after timeout.
func HoldRelayAfterAck(ctx context.Context, dbURL string, pool *pgxpool.Pool, poke func(context.Context), timeout time.Duration) (*RelayHold, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	var lastPoke time.Time
	tries := 0
	for time.Now().Before(deadline) {
		if poke != nil && time.Since(lastPoke) > 700*time.Millisecond {
			go poke(ctx)
			lastPoke = time.Now()
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			conn.Close(ctx)
			return nil, err
		}
		rows, err := tx.Query(ctx, `
			SELECT event_id::text FROM outbox_pending
			ORDER BY shard, id LIMIT 2000 FOR UPDATE SKIP LOCKED`)
		var ids []string
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			conn.Close(ctx)
			return nil, err
		}
		if len(ids) == 0 {
			_ = tx.Rollback(ctx)
			if !sleepCtx(ctx, 2*time.Millisecond) {
				break
			}
			continue
		}
		tries++
		// Wait for the relay to claim, send and then queue its mark behind
		// the locks (its fallback poll is a second).
		me := conn.PgConn().PID()
		wait := time.Now().Add(2500 * time.Millisecond)
		for time.Now().Before(wait) {
			rows, err := pool.Query(ctx, `
				SELECT pid FROM pg_stat_activity
				WHERE datname = current_database() AND $1 = ANY(pg_blocking_pids(pid))
				  AND query LIKE '%DELETE FROM outbox_pending%'`, int32(me))
			var pids []int32
			if err == nil {
				pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
			}
			if err != nil {
				_ = tx.Rollback(ctx)
				conn.Close(ctx)
				return nil, err
			}
			if len(pids) > 0 {
				return &RelayHold{conn: conn, tx: tx, pool: pool, Events: ids, Marks: pids}, nil
			}
			if !sleepCtx(ctx, 5*time.Millisecond) {
				break
			}
		}
		_ = tx.Rollback(ctx)
	}
	conn.Close(context.WithoutCancel(ctx))
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("the relay never came to mark the held rows within %s (%d tries)", timeout, tries)
}

// Abort ends the held relay backends (their process is dead: the mark
// never happened) and releases the locks.
func (h *RelayHold) Abort(ctx context.Context) error {
	var errs []error
	for _, pid := range h.Marks {
		var ok bool
		if err := h.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil {
			errs = append(errs, err)
		}
	}
	// Wait until they are gone, so the rollback cannot let a mark through.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var n int
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])`, h.Marks).Scan(&n); err != nil {
			errs = append(errs, err)
			break
		}
		if n == 0 {
			break
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return errors.Join(append(errs, h.Release(ctx))...)
}

// Release releases the locks and closes the connection.
func (h *RelayHold) Release(ctx context.Context) error {
	err := h.tx.Rollback(ctx)
	h.conn.Close(context.WithoutCancel(ctx))
	if errors.Is(err, pgx.ErrTxClosed) {
		err = nil
	}
	return err
}

// ShardHijack takes a service's outbox shard away from its relays, the way
// a relay instance holds one: the relay sends nothing of that shard until
// Release. The suite publishes the shard's events itself meanwhile (in an
// order of its choosing) and marks them published.
type ShardHijack struct {
	pool  *pgxpool.Pool
	Shard int
	owner string
}

// HijackShard takes the shard of partitionKey for ten minutes at most.
func HijackShard(ctx context.Context, pool *pgxpool.Pool, partitionKey string) (*ShardHijack, error) {
	h := &ShardHijack{pool: pool, Shard: outbox.Shard(partitionKey)}
	err := pool.QueryRow(ctx, `
		UPDATE outbox_shard SET owner = gen_random_uuid(), lease_until = now() + interval '10 minutes'
		WHERE shard = $1 RETURNING owner::text`, h.Shard).Scan(&h.owner)
	if err != nil {
		return nil, fmt.Errorf("hijack outbox shard %d: %w", h.Shard, err)
	}
	return h, nil
}

// OutboxRow is a pending outbox row.
type OutboxRow struct {
	EventID, Topic, Key string
	Envelope            []byte
}

// Pending returns the unpublished rows of partitionKey (those with a pending
// entry; a dead letter has none), oldest first.
func (h *ShardHijack) Pending(ctx context.Context, partitionKey string) ([]OutboxRow, error) {
	rows, err := h.pool.Query(ctx, `
		SELECT e.event_id::text, e.topic, e.partition_key, e.envelope
		FROM outbox_event e JOIN outbox_pending p ON p.shard = e.shard AND p.id = e.id
		WHERE e.partition_key = $1 ORDER BY e.id`, partitionKey)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (r OutboxRow, err error) {
		err = row.Scan(&r.EventID, &r.Topic, &r.Key, &r.Envelope)
		return
	})
}

// MarkPublished marks rows published, as the relay would after the ack: it
// deletes their pending entries.
func (h *ShardHijack) MarkPublished(ctx context.Context, ids []string) error {
	tag, err := h.pool.Exec(ctx, `DELETE FROM outbox_pending WHERE event_id = ANY($1::uuid[])`, ids)
	if err != nil {
		return err
	}
	if int(tag.RowsAffected()) != len(ids) {
		return fmt.Errorf("deleted the pending entries of %d of %d rows: the relay sent some itself", tag.RowsAffected(), len(ids))
	}
	return nil
}

// Release hands the shard back to the relays and wakes them.
func (h *ShardHijack) Release(ctx context.Context) error {
	_, err := h.pool.Exec(ctx, `
		UPDATE outbox_shard SET owner = NULL, lease_until = '-infinity' WHERE shard = $1 AND owner = $2::uuid`, h.Shard, h.owner)
	if err == nil {
		_, err = h.pool.Exec(ctx, `SELECT pg_notify($1, 'rebalance')`, outbox.Channel)
	}
	return err
}
