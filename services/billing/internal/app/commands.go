package app

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Request is what every command gets besides its own input.
type Request struct {
	TenantID string
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

// Key keeps the answer of a command that runs in several transactions (a
// close) under its caller's Idempotency-Key, in the command's own
// transactions. The caller chooses how an answer is stored and sent
// (httpapi: JSON with its HTTP status, idempotency.Steps); a command that
// runs in one transaction takes that transaction from its caller instead,
// and the caller claims and saves around it (idempotency.Run).
type Key interface {
	// Claim claims the key in tx, a transaction of a step before the last
	// that may change something. true: the key has an answer, the command
	// ran to its end before and does nothing more.
	Claim(ctx context.Context, tx pgx.Tx) (bool, error)
	// Save stores result as the key's answer in tx, the command's last.
	Save(ctx context.Context, tx pgx.Tx, result any) error
}

// noKey is the Key of a command nobody retries by key (the close
// scheduler's): the period's locks and status make its close safe to
// repeat.
type noKey struct{}

func (noKey) Claim(context.Context, pgx.Tx) (bool, error) { return false, nil }
func (noKey) Save(context.Context, pgx.Tx, any) error     { return nil }
