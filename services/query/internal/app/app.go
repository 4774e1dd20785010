// Package app is the query service's application layer, in the shape every
// service follows (docs/service-shape.md): one App, built by New from its
// Deps and its Config, holding the inbox handlers that project every public
// event (a per-event row and a summary delta, in the deciding transaction:
// projection.go, analytics.go), the reads (the summary: folded totals plus
// the deltas not folded yet, in one snapshot; the usage analytics; the
// charge traces; the catalog), the background fold of summary deltas
// (RunFolder) and the reconciliation sets query serves (reconcile.go, as in
// every service). Nothing it does reads the time, so it takes no clock.
package app

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
)

// Deps are what the App uses and does not own, given once to New.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger // nil: discard
	// Metrics takes the folder's metrics, summary_deltas_pending and
	// summary_folds_total; nil: none.
	Metrics prometheus.Registerer
}

// Config is the App's settings. The service reads them from service.Env
// (query.Build); a zero field takes its default.
type Config struct {
	// FoldInterval is how often RunFolder folds summary deltas
	// (QUERY_FOLD_INTERVAL; default DefaultFoldInterval).
	FoldInterval time.Duration
	// FoldChunk is how many summary deltas one statement reads, of a fold
	// (each chunk its own transaction, so a backlog folds as many bounded
	// commits) and of a summary's read of the deltas not folded yet
	// (QUERY_FOLD_CHUNK; default DefaultFoldChunk): their longest
	// statement grows with it, not with a tenant's backlog.
	FoldChunk int
}

// DefaultFoldInterval is Config.FoldInterval's default.
const DefaultFoldInterval = time.Second

// DefaultFoldChunk is Config.FoldChunk's default; MaxFoldChunk the largest
// QUERY_FOLD_CHUNK.
const (
	DefaultFoldChunk = 10000
	MaxFoldChunk     = 1000000
)

// App is query: its projection, reads, folder and reconciliation sets
// against its database.
type App struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	cfg     Config
	pending prometheus.Gauge
	folded  prometheus.Counter
	// afterFoldChunk, when set (tests), runs at the end of each chunk's
	// transaction of a fold with the tenant and the deltas the chunk
	// moved; an error rolls the chunk back and fails the round.
	afterFoldChunk func(tenantID string, deltas int64) error
	// afterReadChunk, when set (tests), is told the deltas of each chunk
	// of pending deltas a summary read.
	afterReadChunk func(deltas int64)
}

// New returns the App of d and c.
func New(d Deps, c Config) *App {
	a := &App{pool: d.Pool, log: d.Logger, cfg: c,
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "summary_deltas_pending",
			Help: "Summary deltas (each a consumed batch's events of one tenant, kind and key) not folded into the tenant totals yet (after the last fold), counted up to 10,000."}),
		folded: prometheus.NewCounter(prometheus.CounterOpts{Name: "summary_folds_total",
			Help: "Tenant folds of summary deltas committed by the background folder."}),
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.cfg.FoldInterval <= 0 {
		a.cfg.FoldInterval = DefaultFoldInterval
	}
	if a.cfg.FoldChunk <= 0 {
		a.cfg.FoldChunk = DefaultFoldChunk
	}
	if d.Metrics != nil {
		_ = d.Metrics.Register(a.pending)
		_ = d.Metrics.Register(a.folded)
	}
	return a
}

// Topics are the public topics the query service projects.
var Topics = []string{events.TopicMeter, events.TopicUsage, events.TopicBilling, events.TopicInvoice}

// BatchHandlers are query's set-wise inbox handlers, keyed by their payload
// types' event types (inbox.HandleBatch): the projection of every public
// event (project), the catalog and the tenants' zones for the analytics,
// and the events that share those topics but change no projection,
// absorbed.
func (a *App) BatchHandlers() map[string]inbox.BatchHandler {
	hs := map[string]inbox.BatchHandler{}
	inbox.HandleBatch(hs, project[events.PriceActivated])
	inbox.HandleBatch(hs, project[events.UsageAccepted])
	inbox.HandleBatch(hs, project[events.ChargeRated])
	inbox.HandleBatch(hs, project[events.AdjustmentPosted])
	inbox.HandleBatch(hs, project[events.BillingPeriodClosed])
	inbox.HandleBatch(hs, project[events.InvoiceIssued])
	inbox.HandleBatch(hs, project[events.InvoiceCorrectionIssued])
	// MeterDefined: the catalog, for the analytics.
	inbox.HandleBatch(hs, a.defineMeters)
	// BillingPeriodEnded (a period went into grace, decision 0014) changes
	// no summary; its zone is the analytics' default zone of the tenant.
	inbox.HandleBatch(hs, a.setTenantZones)
	// The meter's schedule watermarks (billing's concern, sent every few
	// seconds per price series) share the meter's topic; plans price facts
	// in billing and no summary holds them; usage's watermarks (decision
	// 0014: billing's concern, every second per partition) share the usage
	// topic.
	inbox.HandleBatch(hs, absorb[events.PriceScheduleWatermark])
	inbox.HandleBatch(hs, absorb[events.PlanPublished])
	inbox.HandleBatch(hs, absorb[events.UsageAcceptedThrough])
	return hs
}
