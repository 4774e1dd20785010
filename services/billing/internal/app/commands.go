package app

import (
	"errors"

	"github.com/usagebilling/billing/pkg/idempotency"
)

// Reply is a command's response: what it answered the first time, or, on a
// replay of the same Idempotency-Key and request, the stored first answer.
type Reply = idempotency.Reply

// Request is what every idempotent command gets besides its own input.
type Request struct {
	TenantID string
	// IdempotencyKey is the client's key; RequestHash identifies the request
	// (idempotency.RequestHash of method, path and body).
	IdempotencyKey string
	RequestHash    string
	// CorrelationID is carried into the events; optional.
	CorrelationID string
	// Actor is who sent the command (the bearer token's subject), recorded
	// in the event and the row of every money-changing command; required.
	Actor string
}

// ErrNoActor is returned for a money-changing command without an actor:
// every one records who sent it.
var ErrNoActor = errors.New("command has no actor")

func (r Request) checkActor() error {
	if r.Actor == "" {
		return ErrNoActor
	}
	return nil
}

// ErrKeyReused is returned when the Idempotency-Key came with another request.
var ErrKeyReused = idempotency.ErrKeyReused

func scope(command, tenantID string) string { return "billing." + command + "/" + tenantID }
