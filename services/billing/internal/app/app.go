// Package app is billing's application layer, in the shape every service
// follows (docs/service-shape.md): one App, built by New from its Deps and
// its Config, holding the handlers of the events it consumes (Handlers,
// BatchHandlers: meters.go, prices.go, rating.go, usage_watermark.go), the
// commands (adjustments, closes, settings) and its background work (the
// close scheduler, RunScheduler). Each change runs in a transaction that
// holds the business change and the events it publishes (events.Append).
// A command's idempotent reply is the HTTP edge's (httpapi): it gives a
// command of one transaction that transaction, with the key claimed in it,
// and the close, which runs in steps, a Key to claim and answer in them.
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

// Deps are what the App uses and does not own, given once to New.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger // nil: discard
	// Clock is "now": the service's configured clock (service.Deps.Clock,
	// decision 0015) or a test's; nil: time.Now.
	Clock func() time.Time
}

// Config is the App's settings. The service reads them from service.Env
// (billing.Build); a zero field takes its default.
type Config struct {
	// WaitForUsage makes closes wait for usage's watermarks and deferred
	// usage (decision 0014). The service turns it on; tests of other things
	// leave it off.
	WaitForUsage bool
	// CloseWait is how long an HTTP close waits for usage before it answers
	// 202 closing (BILLING_CLOSE_WAIT; default DefaultCloseWait).
	CloseWait time.Duration
	// CloseInterval is how often RunScheduler looks for due periods
	// (BILLING_CLOSE_INTERVAL; default DefaultCloseInterval).
	CloseInterval time.Duration
	// MaxSubscriptions is how many subscriptions one tenant may have in
	// effect at any time from the start of its current period on (one
	// ended in the period still counts until the period ends)
	// (BILLING_MAX_SUBSCRIPTIONS; default DefaultMaxSubscriptions): one
	// more is refused 422 limit_exceeded. No period holds more, which
	// bounds its lines priced by a plan (decision 0014).
	MaxSubscriptions int
	// MaxAdjustments is how many adjustments one tenant's period may have,
	// posted before or after its close (BILLING_MAX_ADJUSTMENTS; default
	// DefaultMaxAdjustments): one more is refused 422 limit_exceeded. It
	// bounds every statement that sums a period's adjustments.
	MaxAdjustments int
	// CloseChunk is how many charges one transaction of a close's tally
	// reads (BILLING_CLOSE_CHUNK; default DefaultCloseChunk): its longest
	// statement grows with it, not with the period.
	CloseChunk int
	// PartsFoldAt is how many parts a line of a period may have before
	// the batch that adds one folds them into one (BILLING_PARTS_FOLD_AT;
	// default DefaultPartsFoldAt, 1 to MaxPartsFoldAt; see FoldParts): a
	// period's read sums at most PartsFoldAt + 1 rows a line.
	PartsFoldAt int
}

// Defaults of Config.
const (
	DefaultCloseWait     = 5 * time.Second
	DefaultCloseInterval = 10 * time.Second
	// Two years of monthly plan changes scheduled ahead.
	DefaultMaxSubscriptions = 8
	// Corrections are posted by people: a thousand in one period is far
	// past any billing team's, and summed in milliseconds.
	DefaultMaxAdjustments = 1000
	// A chunk of 10,000 charges is tallied in well under a second.
	DefaultCloseChunk = 10000
	// A fold every 32 batches of a line: a read sums at most 33 rows a
	// line, and the fold's statement is a small part of the batches'.
	DefaultPartsFoldAt = 32
	MaxPartsFoldAt     = 1000
)

// App is billing: its event handlers, commands and close scheduler against
// its database.
type App struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	now     func() time.Time
	cfg     Config
	metrics closeMetrics
	// afterChunk, when set (tests), runs at the end of each chunk's
	// transaction of a close's tally; an error rolls the chunk back.
	afterChunk func(chunk int64) error
}

// New returns the App of d and c.
func New(d Deps, c Config) *App {
	a := &App{pool: d.Pool, log: d.Logger, now: d.Clock, cfg: c, metrics: newCloseMetrics()}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.cfg.CloseWait <= 0 {
		a.cfg.CloseWait = DefaultCloseWait
	}
	if a.cfg.CloseInterval <= 0 {
		a.cfg.CloseInterval = DefaultCloseInterval
	}
	if a.cfg.MaxSubscriptions <= 0 {
		a.cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if a.cfg.MaxAdjustments <= 0 {
		a.cfg.MaxAdjustments = DefaultMaxAdjustments
	}
	if a.cfg.CloseChunk <= 0 {
		a.cfg.CloseChunk = DefaultCloseChunk
	}
	if a.cfg.PartsFoldAt <= 0 {
		a.cfg.PartsFoldAt = DefaultPartsFoldAt
	}
	return a
}

// Now is the App's clock.
func (a *App) Now() time.Time { return a.now() }

// Topics are the topics billing consumes.
var Topics = []string{events.TopicMeter, events.TopicUsage}

// Handlers are billing's inbox handlers, keyed by their payload types'
// event types (inbox.Handle), but for UsageAccepted (BatchHandlers).
func (a *App) Handlers() map[string]inbox.Handler {
	hs := map[string]inbox.Handler{}
	inbox.Handle(hs, a.OnMeterDefined)
	inbox.Handle(hs, a.OnPriceActivated)
	inbox.Handle(hs, a.OnPriceScheduleWatermark)
	inbox.Handle(hs, a.OnPlanPublished)
	inbox.Handle(hs, a.OnUsageAcceptedThrough)
	return hs
}

// BatchHandlers are billing's set-wise inbox handlers: UsageAccepted.
func (a *App) BatchHandlers() map[string]inbox.BatchHandler {
	hs := map[string]inbox.BatchHandler{}
	inbox.HandleBatch(hs, a.OnUsagesAccepted)
	return hs
}

// inTx runs fn in a transaction and commits it when fn returns nil.
func (a *App) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := a.pool.Begin(ctx)
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
