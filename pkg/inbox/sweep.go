package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sweep decides deferred events again: up to limit events that are due,
// every wait key's longest due before any key's second (see the query),
// sweepChunkSize of them to a transaction. It catches wakes
// that were missed: a fact committed by a transaction that ran concurrently
// with the deferral, or a fact that arrived without an inbox event
// providing it. An event is due at once after its first deferral, then
// after backing off exponentially (2s, 4s, 8s, then every 10s) each time it
// is still deferred, so many events waiting for a late fact do not load the
// database. It returns how many events were applied (those woken by them
// included); an error is transient and stops the sweep, but for a handler
// failing within its retry budget (RetryError): that chunk is decided again
// one event to a transaction, and the failing event is tried again by the
// next sweep.
//
// A chunk shares one commit: deciding each event in a transaction of its
// own made a sweep cost a commit per event, and on a loaded machine the one
// event whose missed wake held back all the others (a price version behind
// a thousand facts waiting for its schedule) waited a minute behind them.
func (ib *Inbox) Sweep(ctx context.Context, pool *pgxpool.Pool, limit int) (applied int, err error) {
	if limit <= 0 {
		limit = 100
	}
	// Of the due events (the sweepWindow times limit longest due), each
	// wait key's longest due first, then each key's second, ...: a missed
	// wake is a key's, and one event waiting alone on its key (a price
	// version whose lock holder committed first) is not left behind the
	// thousands of facts that wait together on another (its schedule).
	rows, err := pool.Query(ctx, `
		WITH due AS (
			SELECT event_id, wait_key, next_attempt FROM inbox_deferred WHERE next_attempt <= now()
			ORDER BY next_attempt LIMIT $2
		)
		SELECT event_id FROM (
			SELECT event_id, next_attempt, row_number() OVER (PARTITION BY wait_key ORDER BY next_attempt) AS turn FROM due
		) ranked
		ORDER BY turn, next_attempt LIMIT $1`, limit, limit*sweepWindow)
	if err != nil {
		return 0, fmt.Errorf("sweep deferred: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("sweep deferred: %w", err)
	}
	for len(ids) > 0 {
		chunk := ids[:min(sweepChunkSize, len(ids))]
		ids = ids[len(chunk):]
		n, err := ib.sweepChunk(ctx, pool, chunk)
		var retry *RetryError
		if errors.As(err, &retry) {
			// One event failed within its budget: the chunk is rolled back;
			// decide its events one by one, so the others are not held up.
			ib.log.WarnContext(ctx, "deferred event failed; deciding its sweep chunk one by one",
				"event_id", retry.EventID, "err", err)
			n, err = ib.sweepEach(ctx, pool, chunk)
		}
		applied += n
		if err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// sweepChunkSize is how many deferred events one transaction of a sweep decides.
const sweepChunkSize = 100

// sweepWindow is how many times a sweep's limit of due events it orders by
// wait key (a bounded read, whatever the backlog).
const sweepWindow = 10

// sweepChunk decides the deferred events ids again in one transaction.
func (ib *Inbox) sweepChunk(ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID) (int, error) {
	var ds []Decision
	err := pgx.BeginTxFunc(ctx, pool, DecideTx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT raw, topic, partition, "offset" FROM inbox_deferred
			WHERE event_id = ANY($1::uuid[])
			ORDER BY aggregate_version, first_seen, event_id
			FOR UPDATE SKIP LOCKED`, ids) // others are decided meanwhile, or being decided
		if err != nil {
			return err
		}
		items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*item, error) {
			var m Message
			if err := row.Scan(&m.Raw, &m.Topic, &m.Partition, &m.Offset); err != nil {
				return nil, err
			}
			return ib.newItem(m, false), nil
		})
		if err != nil || len(items) == 0 {
			return err
		}
		ds, err = ib.process(ctx, tx, items)
		return err
	})
	var retry *RetryError
	if err != nil && !errors.As(err, &retry) {
		return 0, fmt.Errorf("sweep deferred: %w", err)
	}
	if err != nil {
		return 0, err
	}
	return ib.observeSweep(ds), nil
}

// sweepEach decides the deferred events ids again, each in its own
// transaction.
func (ib *Inbox) sweepEach(ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID) (applied int, err error) {
	for _, id := range ids {
		var ds []Decision
		err := pgx.BeginTxFunc(ctx, pool, DecideTx, func(tx pgx.Tx) error {
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
		applied += ib.observeSweep(ds)
	}
	return applied, nil
}

// observeSweep records the decisions of a committed sweep transaction and
// returns how many applied.
func (ib *Inbox) observeSweep(ds []Decision) int {
	ib.Observe(ds)
	applied := 0
	for _, d := range ds {
		if d.Outcome == OutcomeApplied {
			applied++
		}
	}
	return applied
}
