package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sweep decides deferred events again, each in its own transaction: up to
// limit events that are due, longest due first. It catches wakes that were
// missed: a fact committed by a transaction that ran concurrently with the
// deferral, or a fact that arrived without an inbox event providing it. An
// event is due at once after its first deferral, then after backing off
// exponentially (2s, 4s, 8s, then every 10s) each time it is still deferred, so
// many events waiting for a late fact do not load the database. It returns
// how many events were applied (those woken by them included); an error is
// transient and stops the sweep, but for a handler failing within its retry
// budget (RetryError), whose event is tried again by the next sweep.
func (ib *Inbox) Sweep(ctx context.Context, pool *pgxpool.Pool, limit int) (applied int, err error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := pool.Query(ctx, `
		SELECT event_id FROM inbox_deferred WHERE next_attempt <= now()
		ORDER BY next_attempt LIMIT $1`, limit)
	if err != nil {
		return 0, fmt.Errorf("sweep deferred: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("sweep deferred: %w", err)
	}
	for _, id := range ids {
		var ds []Decision
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var m Message
			err := tx.QueryRow(ctx, `
				SELECT raw, topic, partition, "offset" FROM inbox_deferred
				WHERE event_id = $1 FOR UPDATE SKIP LOCKED`, id).
				Scan(&m.Raw, &m.Topic, &m.Partition, &m.Offset)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // decided meanwhile, or being decided
			}
			if err != nil {
				return err
			}
			ds, err = ib.process(ctx, tx, []*item{ib.newItem(m, false)})
			return err
		})
		var retry *RetryError
		if errors.As(err, &retry) {
			// The handler failed within its budget: the next sweep tries
			// again; the other events are not held up by it.
			ib.log.WarnContext(ctx, "deferred event failed; will retry", "event_id", id, "err", err)
			continue
		}
		if err != nil {
			return applied, fmt.Errorf("sweep deferred %s: %w", id, err)
		}
		ib.Observe(ds)
		for _, d := range ds {
			if d.Outcome == OutcomeApplied {
				applied++
			}
		}
	}
	return applied, nil
}
