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

// Redecide decides a retained event again, inside tx, from the raw bytes the
// inbox kept, through today's decoders and handlers: the deferred event with
// that id, or else its latest quarantined message (see RedecideQuarantined).
// It never edits or invents an event. The first decision is the event's; the
// others are of deferred events it woke. ErrNotRetained means the inbox holds
// the event neither deferred nor quarantined. Call Observe after commit.
func (ib *Inbox) Redecide(ctx context.Context, tx pgx.Tx, eventID uuid.UUID) ([]Decision, error) {
	var m Message
	err := tx.QueryRow(ctx, `
		SELECT raw, topic, partition, "offset" FROM inbox_deferred WHERE event_id = $1 FOR UPDATE`, eventID).
		Scan(&m.Raw, &m.Topic, &m.Partition, &m.Offset)
	switch {
	case err == nil:
		ds, err := ib.process(ctx, tx, []*item{ib.newItem(m, false)})
		if err != nil {
			return nil, fmt.Errorf("redecide %s: %w", eventID, err)
		}
		return ds, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("redecide %s: %w", eventID, err)
	}
	// Prefer a row still quarantined; a redrive asked again for a redriven
	// event decides it again, which is harmless (a DUPLICATE once applied).
	var id int64
	err = tx.QueryRow(ctx, `
		SELECT id FROM inbox_quarantine WHERE event_id = $1
		ORDER BY state = 'quarantined' DESC, id DESC LIMIT 1`, eventID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("redecide %s: %w", eventID, ErrNotRetained)
	}
	if err != nil {
		return nil, fmt.Errorf("redecide %s: %w", eventID, err)
	}
	return ib.RedecideQuarantined(ctx, tx, id)
}

// RedecideQuarantined decides the quarantined message of inbox_quarantine row
// id again, inside tx (it also reaches messages without an event id). When it
// is not quarantined again the row's state becomes 'redriven'; the row is
// never deleted. When it is, the same row counts one more attempt.
func (ib *Inbox) RedecideQuarantined(ctx context.Context, tx pgx.Tx, id int64) ([]Decision, error) {
	var m Message
	err := tx.QueryRow(ctx, `
		SELECT raw, topic, partition, "offset" FROM inbox_quarantine WHERE id = $1 FOR UPDATE`, id).
		Scan(&m.Raw, &m.Topic, &m.Partition, &m.Offset)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("redecide quarantined %d: %w", id, ErrNotRetained)
	}
	if err != nil {
		return nil, fmt.Errorf("redecide quarantined %d: %w", id, err)
	}
	ds, err := ib.process(ctx, tx, []*item{ib.newItem(m, false)})
	if err != nil {
		return nil, fmt.Errorf("redecide quarantined %d: %w", id, err)
	}
	if ds[0].Outcome != OutcomeQuarantined {
		if _, err := tx.Exec(ctx, `
			UPDATE inbox_quarantine SET state = 'redriven', redriven_at = now()
			WHERE id = $1 AND state = 'quarantined'`, id); err != nil {
			return nil, fmt.Errorf("mark quarantined %d redriven: %w", id, err)
		}
	}
	return ds, nil
}
