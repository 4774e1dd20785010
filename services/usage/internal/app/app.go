// Package app is the usage service's application layer, in the shape every
// service follows (docs/service-shape.md): one App, built by New from its
// Deps and its Config, holding the commands (Accept, Fact: accept.go), the
// handlers of the events it consumes (Handlers: evidence.go) and its
// background work (RunWatermarks: watermark.go). It knows no HTTP and no
// Kafka: httpapi and the service's Build adapt it.
package app

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
)

// Deps are what the App uses and does not own, given once to New.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger // nil: discard
	// Clock is "now": the service's configured clock (service.Deps.Clock,
	// decision 0015) or a test's; nil: time.Now.
	Clock func() time.Time
}

// Config is the App's settings. The service reads them from service.Env
// (usage.Build); a zero field takes its default.
type Config struct {
	// WatermarkInterval is how often RunWatermarks cuts and publishes usage's
	// watermarks (USAGE_WATERMARK_INTERVAL; default 1s, decision 0014).
	WatermarkInterval time.Duration
}

// DefaultWatermarkInterval is Config.WatermarkInterval's default.
const DefaultWatermarkInterval = time.Second

// App runs the usage service's commands, event handlers and watermarks
// against its database.
type App struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time
	cfg  Config
}

// New returns the App of d and c.
func New(d Deps, c Config) *App {
	a := &App{pool: d.Pool, log: d.Logger, now: d.Clock, cfg: c}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.cfg.WatermarkInterval <= 0 {
		a.cfg.WatermarkInterval = DefaultWatermarkInterval
	}
	return a
}

// Now is the App's clock, for checks made before a command runs.
func (a *App) Now() time.Time { return a.now() }

// Topics are the topics whose events Handlers handles.
var Topics = []string{events.TopicMeter}

// Handlers returns the inbox handlers of the events usage consumes, each
// keyed by its payload type (inbox.Handle).
func (a *App) Handlers() map[string]inbox.Handler {
	hs := map[string]inbox.Handler{}
	inbox.Handle(hs, a.ApplyMeterDefined)
	inbox.Handle(hs, a.ApplyPriceActivated)
	inbox.Handle(hs, a.IgnoreWatermark)
	inbox.Handle(hs, a.IgnorePlan)
	return hs
}
