package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Lister is what ListQuarantine needs: a pool, a connection or a transaction.
type Lister interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// QuarantineFilter selects quarantined messages for ListQuarantine.
type QuarantineFilter struct {
	// Reason and TenantID filter when set.
	Reason   string
	TenantID string
	// EventID filters when not zero.
	EventID uuid.UUID
	// All includes messages already redriven; by default only those still
	// quarantined are listed.
	All bool
	// After lists rows with an id greater than After (a cursor).
	After int64
	// Limit is the most rows returned (100 when zero or less).
	Limit int
}

// QuarantinedMessage is one inbox_quarantine row, without its raw bytes.
type QuarantinedMessage struct {
	ID        int64
	EventID   uuid.UUID // zero when the message is not an envelope
	EventType string
	TenantID  string
	Reason    string
	// Detail is what the handler said (Quarantined.Detail); empty when the
	// inbox quarantined the message itself.
	Detail     string
	RawSHA256  string
	Topic      string
	Partition  int32
	Offset     int64
	FirstSeen  time.Time
	LastSeen   time.Time
	Attempts   int
	State      string // "quarantined" | "redriven"
	RedrivenAt *time.Time
}

// ListQuarantine lists quarantined messages in id order (the order they were
// first quarantined).
func ListQuarantine(ctx context.Context, q Lister, f QuarantineFilter) ([]QuarantinedMessage, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := q.Query(ctx, `
		SELECT id, event_id, COALESCE(event_type, ''), COALESCE(tenant_id, ''), reason, COALESCE(detail, ''), raw_sha256,
		       topic, partition, "offset", first_seen, last_seen, attempts, state, redriven_at
		FROM inbox_quarantine
		WHERE id > $1
		  AND ($2::bool OR state = 'quarantined')
		  AND ($3 = '' OR reason = $3)
		  AND ($4 = '' OR tenant_id = $4)
		  AND ($5::uuid IS NULL OR event_id = $5)
		ORDER BY id LIMIT $6`,
		f.After, f.All, f.Reason, f.TenantID, pgtype.UUID{Bytes: f.EventID, Valid: f.EventID != uuid.Nil}, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QuarantinedMessage, error) {
		var m QuarantinedMessage
		var id pgtype.UUID
		err := row.Scan(&m.ID, &id, &m.EventType, &m.TenantID, &m.Reason, &m.Detail, &m.RawSHA256, &m.Topic, &m.Partition,
			&m.Offset, &m.FirstSeen, &m.LastSeen, &m.Attempts, &m.State, &m.RedrivenAt)
		if id.Valid {
			m.EventID = id.Bytes
		}
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", err)
	}
	return out, nil
}
