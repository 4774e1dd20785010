package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/outbox"
)

// Meta is what an event needs besides its payload. The event type, schema
// version and aggregate type follow from the payload's type (and the topic
// from the event type, see Topic); the partition key, digest and times are
// envelope.New's.
type Meta struct {
	// Producer names the producing service.
	Producer string
	// TenantID is the tenant the event belongs to.
	TenantID string
	// AggregateID identifies the aggregate that emits the event.
	AggregateID string
	// AggregateVersion is the aggregate's version after this event; zero
	// means 1, the first and, for most aggregates, the only event.
	AggregateVersion int64
	// OccurredAt is when the fact happened.
	OccurredAt time.Time
	// EventID is optional: an id chosen before the event is built (a row
	// that records its event's id was written first). Zero: a new UUIDv7.
	EventID uuid.UUID
	// CorrelationID is a command's (the request's, or a scheduler's) and
	// optional. An event caused by another takes its correlation id from it
	// (Caused) and leaves this empty.
	CorrelationID string
}

// errCausedCorrelation refuses a Meta that sets what Caused copies.
var errCausedCorrelation = errors.New("a caused event takes its correlation id from its cause; Meta.CorrelationID must be empty")

// New builds the envelope of an event that starts here: a command's, or a
// scheduler's. It has no causation id; its traceparent is the one
// outbox.Append writes (the request's span).
func New(payload Payload, m Meta) (envelope.Envelope, error) {
	return build(payload, m, "", "")
}

// Caused builds the envelope of an event emitted while handling by, the
// consumed event it follows from. It copies from by the correlation id (by's
// event id when by has none: the flow starts at by), the causation id (by's
// event id) and the traceparent, so one flow's events share one correlation
// id and one trace. m.CorrelationID must be empty.
func Caused(by *envelope.Envelope, payload Payload, m Meta) (envelope.Envelope, error) {
	if m.CorrelationID != "" {
		return envelope.Envelope{}, fmt.Errorf("build %s: %w", payload.Type(), errCausedCorrelation)
	}
	m.CorrelationID = by.CorrelationID
	if m.CorrelationID == "" {
		m.CorrelationID = by.EventID.String()
	}
	return build(payload, m, by.EventID.String(), by.Traceparent)
}

func build(payload Payload, m Meta, causationID, traceparent string) (envelope.Envelope, error) {
	t := payload.Type()
	k, ok := byType[t]
	if !ok {
		return envelope.Envelope{}, fmt.Errorf("build %s: not in the contract's table of event types", t)
	}
	version := m.AggregateVersion
	if version == 0 {
		version = 1
	}
	env, err := envelope.New(envelope.Meta{
		EventID:          m.EventID,
		EventType:        t,
		SchemaVersion:    SchemaVersion,
		TenantID:         m.TenantID,
		AggregateType:    k.aggregateType,
		AggregateID:      m.AggregateID,
		AggregateVersion: version,
		OccurredAt:       m.OccurredAt,
		Producer:         m.Producer,
		CorrelationID:    m.CorrelationID,
		CausationID:      causationID,
		Traceparent:      traceparent,
	}, payload)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("build %s: %w", t, err)
	}
	return env, nil
}

// Append appends evs to the outbox inside tx, each on its event type's topic
// (Topic); consecutive events of one topic go in one outbox.Append, and the
// order of evs is kept. An event whose type is outside the contract is
// refused. On an error some may have been appended: the caller's transaction
// must not commit (it never does on an error).
func Append(ctx context.Context, tx pgx.Tx, evs ...envelope.Envelope) error {
	for start := 0; start < len(evs); {
		topic := Topic(evs[start].EventType)
		if topic == "" {
			return fmt.Errorf("append to outbox: %s %s: not an event type of the contract", evs[start].EventType, evs[start].EventID)
		}
		end := start + 1
		for end < len(evs) && Topic(evs[end].EventType) == topic {
			end++
		}
		if err := outbox.Append(ctx, tx, topic, evs[start:end]...); err != nil {
			return err
		}
		start = end
	}
	return nil
}
