// Package app is the invoice service's application layer, in the shape
// every service follows (docs/service-shape.md): one App, built by New from
// its Deps and its Config, holding the handlers of billing's events that
// turn them into invoice charges and lines, issued invoices and correction
// notes, with their events appended to the outbox and their webhook intents
// recorded in the same transaction (Handlers, BatchHandlers:
// invoicing.go), and the reads behind the HTTP API (Invoice, Invoices:
// read.go; Reconciliation: reconcile.go). It knows no HTTP and no Kafka:
// httpapi and the service's Build adapt it.
package app

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
)

// Deps are what the App uses and does not own, given once to New.
type Deps struct {
	Pool   *pgxpool.Pool // the reads'; the handlers use the inbox's transaction
	Logger *slog.Logger  // nil: discard
	// Clock is "now", the time invoices and correction notes are issued at:
	// the service's configured clock (service.Deps.Clock, decision 0015) or
	// a test's; nil: time.Now.
	Clock func() time.Time
}

// Config is the App's settings (invoice.Build reads them from service.Env
// through webhook.LoadConfig); a zero field takes its default.
type Config struct {
	// WebhookTTL is how long after its commit a webhook intent is tried
	// before it expires (WEBHOOK_TTL; default webhook.DefaultTTL).
	WebhookTTL time.Duration
	// MaxGrants is how many credit grants with a balance that have not
	// expired one tenant may have (INVOICE_MAX_CREDIT_GRANTS; default
	// DefaultMaxGrants): one more is refused 422 limit_exceeded.
	MaxGrants int
	// MaxAlerts is how many live alerts one tenant may have
	// (INVOICE_MAX_ALERTS; default DefaultMaxAlerts): one more is refused
	// 422 limit_exceeded.
	MaxAlerts int
	// MaxReadLines is how many lines and correction notes one read of
	// invoices (a page of the list, or one invoice) may answer (default
	// DefaultMaxReadLines): more is refused 422 too_many_lines.
	MaxReadLines int
	// CloseChunk is how many charges one statement of a close's tally
	// reads (INVOICE_CLOSE_CHUNK; default DefaultCloseChunk): its longest
	// statement grows with it, not with the period.
	CloseChunk int
	// CloseChunksPerAttempt is how many chunks of a close's tally one
	// decision of the close walks, each in its own transaction, before it
	// sets the close aside for the inbox's sweep to resume
	// (INVOICE_CLOSE_CHUNKS_PER_ATTEMPT; default
	// DefaultCloseChunksPerAttempt): the deciding transaction stays open
	// for at most this many chunks, whatever the period's size.
	CloseChunksPerAttempt int
	// PartsFoldAt is how many parts a line of a period may have before
	// the next batch of the period folds them into one
	// (INVOICE_PARTS_FOLD_AT; default DefaultPartsFoldAt, 1 to
	// MaxPartsFoldAt; see foldParts).
	PartsFoldAt int
}

// DefaultPartsFoldAt is Config.PartsFoldAt when unset; MaxPartsFoldAt the
// largest INVOICE_PARTS_FOLD_AT.
const (
	DefaultPartsFoldAt = 32
	MaxPartsFoldAt     = 1000
)

// DefaultCloseChunk is Config.CloseChunk when unset; MaxCloseChunk the
// largest INVOICE_CLOSE_CHUNK.
const (
	DefaultCloseChunk = 10000
	MaxCloseChunk     = 1000000
)

// DefaultCloseChunksPerAttempt is Config.CloseChunksPerAttempt when unset.
const DefaultCloseChunksPerAttempt = 25

// DefaultMaxReadLines is Config.MaxReadLines when unset.
const DefaultMaxReadLines = 12000

// DefaultMaxAlerts is Config.MaxAlerts when unset.
const DefaultMaxAlerts = 50

// DefaultMaxGrants is Config.MaxGrants when unset.
const DefaultMaxGrants = 100

// App applies billing's events to the invoices and reads them.
type App struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	now      func() time.Time
	webhooks *webhook.Recorder
	// maxGrants is Config.MaxGrants.
	maxGrants int
	// maxAlerts is Config.MaxAlerts.
	maxAlerts int
	// maxReadLines is Config.MaxReadLines.
	maxReadLines int
	// afterLock, when set (tests: SetAfterLock), runs after a close locks
	// its invoices and before it tallies them.
	afterLock func()
	// closeChunk is Config.CloseChunk.
	closeChunk int
	// closeChunksPerAttempt is Config.CloseChunksPerAttempt.
	closeChunksPerAttempt int
	// partsFoldAt is Config.PartsFoldAt.
	partsFoldAt int
	// afterChunk, when set (tests: SetAfterChunk), runs after each chunk
	// of a close's tally (after its commit, with a pool) with the charges
	// it read.
	afterChunk func(charges int64)
	// afterValueChunk, when set (tests: SetAfterValueChunk), runs after
	// each chunk of a close's count of distinct values (in its step) with
	// the values it read.
	afterValueChunk func(values int64)
}

// New returns the App of d and c.
func New(d Deps, c Config) *App {
	a := &App{pool: d.Pool, log: d.Logger, now: d.Clock}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if c.WebhookTTL <= 0 {
		c.WebhookTTL = webhook.DefaultTTL
	}
	a.webhooks = &webhook.Recorder{TTL: c.WebhookTTL}
	a.maxGrants = c.MaxGrants
	if a.maxGrants <= 0 {
		a.maxGrants = DefaultMaxGrants
	}
	a.maxAlerts = c.MaxAlerts
	if a.maxAlerts <= 0 {
		a.maxAlerts = DefaultMaxAlerts
	}
	a.closeChunk = c.CloseChunk
	if a.closeChunk <= 0 {
		a.closeChunk = DefaultCloseChunk
	}
	a.closeChunksPerAttempt = c.CloseChunksPerAttempt
	if a.closeChunksPerAttempt <= 0 {
		a.closeChunksPerAttempt = DefaultCloseChunksPerAttempt
	}
	a.partsFoldAt = c.PartsFoldAt
	if a.partsFoldAt <= 0 {
		a.partsFoldAt = DefaultPartsFoldAt
	}
	a.maxReadLines = c.MaxReadLines
	if a.maxReadLines <= 0 {
		a.maxReadLines = DefaultMaxReadLines
	}
	return a
}

// Topics are the topics whose events Handlers and BatchHandlers handle.
var Topics = []string{events.TopicBilling}

// Handlers returns the inbox handlers of the events invoice consumes one by
// one, each keyed by its payload type (inbox.Handle).
func (a *App) Handlers() map[string]inbox.Handler {
	hs := map[string]inbox.Handler{}
	inbox.Handle(hs, a.ApplyAdjustmentPosted)
	inbox.Handle(hs, a.ApplyPeriodClosed)
	inbox.Handle(hs, a.ApplyPeriodEnded)
	return hs
}

// BatchHandlers returns the set-wise handler of ChargeRated
// (inbox.HandleBatch).
func (a *App) BatchHandlers() map[string]inbox.BatchHandler {
	hs := map[string]inbox.BatchHandler{}
	inbox.HandleBatch(hs, a.ApplyChargesRated)
	return hs
}
