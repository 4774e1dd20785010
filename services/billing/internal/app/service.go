// Package app is billing's application layer: the inbox handlers that
// replicate price evidence and rate usage, and the commands that post
// adjustments and close periods. Each runs in one transaction that holds the
// business change, the events it publishes (events.Append) and, for
// commands, the idempotent response.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
)

// Producer is the producer name of billing's events.
const Producer = "billing"

// Service is billing.
type Service struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time
	// gate: closes wait for usage's watermarks (WaitForUsage); closeWait is
	// how long an HTTP close waits before it answers closing.
	gate      bool
	closeWait time.Duration
	metrics   *closeMetrics
}

// New returns the billing service on pool.
func New(pool *pgxpool.Pool, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{pool: pool, log: log, now: time.Now}
}

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.now() }

// Topics are the topics billing consumes.
var Topics = []string{events.TopicMeter, events.TopicUsage}

// Handlers are billing's inbox handlers, keyed by their payload types'
// event types (inbox.Handle), but for UsageAccepted (BatchHandlers).
func (s *Service) Handlers() map[string]inbox.Handler {
	hs := map[string]inbox.Handler{}
	inbox.Handle(hs, s.OnMeterDefined)
	inbox.Handle(hs, s.OnPriceActivated)
	inbox.Handle(hs, s.OnPriceScheduleWatermark)
	inbox.Handle(hs, s.OnUsageAcceptedThrough)
	return hs
}

// BatchHandlers are billing's set-wise inbox handlers: UsageAccepted.
func (s *Service) BatchHandlers() map[string]inbox.BatchHandler {
	hs := map[string]inbox.BatchHandler{}
	inbox.HandleBatch(hs, s.OnUsagesAccepted)
	return hs
}

// inTx runs fn in a transaction and commits it when fn returns nil.
func (s *Service) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ErrInternal marks a broken invariant of billing's own data.
var ErrInternal = errors.New("billing invariant broken")
