package ops

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
)

// PublishQuarantine returns the inbox.Options.OnQuarantine hook of service:
// it appends an EventQuarantined for the message to the outbox, in the
// deciding transaction. A quarantined EventQuarantined is not announced
// again, so a consumer that cannot read the notices cannot feed itself more.
func PublishQuarantine(service string) func(context.Context, pgx.Tx, inbox.Quarantined) error {
	return func(ctx context.Context, tx pgx.Tx, q inbox.Quarantined) error {
		if q.EventType == events.TypeEventQuarantined {
			return nil
		}
		p := events.EventQuarantined{
			Service: service, EventType: q.EventType, EventTenantID: q.TenantID, Reason: q.Reason,
			Topic: q.Topic, Partition: q.Partition, Offset: q.Offset, QuarantinedAt: time.Now().UTC(),
			RawSHA256: q.RawSHA256,
		}
		meta := events.Meta{
			Producer: service, TenantID: events.OpsTenant,
			AggregateID: events.QuarantineAggregateID(service, q.RawSHA256), OccurredAt: p.QuarantinedAt,
		}
		if q.EventID != uuid.Nil {
			p.EventID = q.EventID.String()
		}
		// The notice is caused by the quarantined event: by its envelope when
		// it decoded, by its id alone when only that could be read (the
		// correlation id is then that id), by nothing when the bytes are no
		// envelope.
		var env envelope.Envelope
		var err error
		switch {
		case q.Envelope != nil:
			env, err = events.Caused(q.Envelope, p, meta)
		case q.EventID != uuid.Nil:
			env, err = events.Caused(&envelope.Envelope{EventID: q.EventID}, p, meta)
		default:
			env, err = events.New(p, meta)
		}
		if err != nil {
			return err
		}
		return events.Append(ctx, tx, env)
	}
}

// Redriver is the inbox handler of RedriveRequested for one service.
type Redriver struct {
	service string
	inbox   *inbox.Inbox
	log     *slog.Logger
}

// NewRedriver returns the Redriver of service. Its inbox is set with
// SetInbox once built (the inbox is built with the Redriver's handler).
func NewRedriver(service string, log *slog.Logger) *Redriver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Redriver{service: service, log: log.With("component", "redrive")}
}

// SetInbox sets the inbox whose retained events the Redriver redrives.
// Call it before the consumer starts.
func (r *Redriver) SetInbox(ib *inbox.Inbox) { r.inbox = ib }

// Handle acts on a RedriveRequested addressed to the service (others are
// applied as nothing to do) and appends its RedriveCompleted, in tx.
func (r *Redriver) Handle(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, req events.RedriveRequested) (inbox.Outcome, error) {
	if req.Service != r.service {
		return inbox.Outcome{}, nil
	}
	if r.inbox == nil {
		return inbox.Outcome{}, errors.New("redrive: no inbox set") // retried, then quarantined: a wiring bug must not lose requests
	}
	action := req.Action
	if action == "" {
		action = events.ActionRedrive
	}
	outcome, reason, err := r.act(ctx, tx, action, req.EventID)
	if err != nil {
		return inbox.Outcome{}, err
	}
	done := events.RedriveCompleted{
		RedriveID: req.RedriveID, Service: r.service, EventID: req.EventID, Action: action,
		Outcome: outcome, Reason: reason,
	}
	env, err := events.Caused(&d.Envelope, done, events.Meta{
		Producer: r.service, TenantID: events.OpsTenant,
		AggregateID: events.RedriveAggregateID(req.RedriveID) + ".completed", OccurredAt: time.Now(),
	})
	if err != nil {
		return inbox.Outcome{}, err
	}
	if err := events.Append(ctx, tx, env); err != nil {
		return inbox.Outcome{}, err
	}
	r.log.InfoContext(ctx, "redrive completed", "redrive_id", req.RedriveID, "action", action,
		"event_id", req.EventID, "outcome", outcome, "reason", reason, "actor", req.Actor,
		"correlation_id", d.Envelope.CorrelationID)
	return inbox.Outcome{}, nil
}

// act performs the request; an error is retried by the inbox (without limit
// for the database's, within the retry budget for any other).
func (r *Redriver) act(ctx context.Context, tx pgx.Tx, action, eventID string) (outcome, reason string, err error) {
	id, perr := uuid.Parse(eventID)
	if perr != nil {
		return events.OutcomeNotFound, inbox.ReasonInvalidEventID, nil
	}
	switch action {
	case events.ActionRedrive:
		ds, err := r.inbox.Redrive(ctx, tx, id)
		if errors.Is(err, inbox.ErrNotRetained) {
			return events.OutcomeNotFound, "", nil
		}
		if err != nil {
			return "", "", err
		}
		return ds[0].Outcome, ds[0].Reason, nil
	case events.ActionRedriveDeadLetter:
		released, err := outbox.RedriveDeadLetter(ctx, tx, id)
		if err != nil {
			return "", "", err
		}
		if !released {
			return events.OutcomeNotFound, "", nil
		}
		return events.OutcomeReleased, "", nil
	default:
		return events.OutcomeNotFound, inbox.ReasonUnknownAction, nil
	}
}
