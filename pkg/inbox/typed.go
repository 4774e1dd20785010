package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
)

// TypedHandler applies one decoded event whose payload is a T (see On).
type TypedHandler[T any] func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p T) (Outcome, error)

// TypedBatchHandler applies decoded events whose payloads are Ts: ps[i] is
// the payload of ds[i] (see OnBatch).
type TypedBatchHandler[T any] func(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, ps []T) ([]Outcome, error)

// On returns the Handler that gives h the event's payload as a T. The payload
// type is checked here, once for every handler: an event whose payload is not
// a T (the registry and the handler map disagree) is quarantined as
// ReasonUnexpectedPayload without calling h.
func On[T any](h TypedHandler[T]) Handler {
	return func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (Outcome, error) {
		p, err := payloadOf[T](d)
		if err != nil {
			return Outcome{}, err
		}
		return h(ctx, tx, d, p)
	}
}

// OnBatch is On for a BatchHandler: the first event whose payload is not a T
// is quarantined as ReasonUnexpectedPayload (its ItemError) without calling h.
func OnBatch[T any](h TypedBatchHandler[T]) BatchHandler {
	return func(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded) ([]Outcome, error) {
		ps := make([]T, len(ds))
		for i, d := range ds {
			p, err := payloadOf[T](d)
			if err != nil {
				return nil, ItemError(i, err)
			}
			ps[i] = p
		}
		return h(ctx, tx, ds, ps)
	}
}

func payloadOf[T any](d *envelope.Decoded) (T, error) {
	p, ok := d.Payload.(T)
	if !ok {
		var want T
		return want, Permanent(ReasonUnexpectedPayload, fmt.Errorf("%s payload is %T, want %T",
			d.Envelope.EventType, d.Payload, want))
	}
	return p, nil
}
