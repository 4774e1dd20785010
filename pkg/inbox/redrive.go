package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Redrive decides a retained event again, inside tx, from the raw bytes the
// inbox kept, through today's decoders and handlers: the deferred event with
// that id, or else its latest quarantined message (see RedriveQuarantined).
// It never edits or invents an event. The first decision is the event's; the
// others are of deferred events it woke. ErrNotRetained means the inbox holds
// the event neither deferred nor quarantined. Call Observe after commit.
func (ib *Inbox) Redrive(ctx context.Context, tx pgx.Tx, eventID uuid.UUID) ([]Decision, error) {
	var m Message
	err := tx.QueryRow(ctx, `
		SELECT raw, topic, partition, "offset" FROM inbox_deferred WHERE event_id = $1 FOR UPDATE`, eventID).
		Scan(&m.Raw, &m.Topic, &m.Partition, &m.Offset)
	switch {
	case err == nil:
		ds, err := ib.process(ctx, tx, []*item{ib.newItem(m, false)})
		if err != nil {
			return nil, fmt.Errorf("redrive %s: %w", eventID, err)
		}
		return ds, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("redrive %s: %w", eventID, err)
	}
	// Prefer a row still quarantined; a redrive asked again for a redriven
	// event decides it again, which is harmless (a DUPLICATE once applied).
	var id int64
	err = tx.QueryRow(ctx, `
		SELECT id FROM inbox_quarantine WHERE event_id = $1
		ORDER BY state = 'quarantined' DESC, id DESC LIMIT 1`, eventID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("redrive %s: %w", eventID, ErrNotRetained)
	}
	if err != nil {
		return nil, fmt.Errorf("redrive %s: %w", eventID, err)
	}
	return ib.RedriveQuarantined(ctx, tx, id)
}

// RedriveQuarantined decides the quarantined message of inbox_quarantine row
// id again, inside tx (it also reaches messages without an event id). When it
// is not quarantined again the row's state becomes 'redriven'; the row is
// never deleted. When it is, the same row counts one more attempt.
func (ib *Inbox) RedriveQuarantined(ctx context.Context, tx pgx.Tx, id int64) ([]Decision, error) {
	var m Message
	err := tx.QueryRow(ctx, `
		SELECT raw, topic, partition, "offset" FROM inbox_quarantine WHERE id = $1 FOR UPDATE`, id).
		Scan(&m.Raw, &m.Topic, &m.Partition, &m.Offset)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("redrive quarantined %d: %w", id, ErrNotRetained)
	}
	if err != nil {
		return nil, fmt.Errorf("redrive quarantined %d: %w", id, err)
	}
	ds, err := ib.process(ctx, tx, []*item{ib.newItem(m, false)})
	if err != nil {
		return nil, fmt.Errorf("redrive quarantined %d: %w", id, err)
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
