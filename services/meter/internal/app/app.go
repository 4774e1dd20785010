// Package app is the meter service's application layer, in the shape every
// service follows (docs/service-shape.md): one App, built by New from its
// Deps and its Config, holding the commands (ActivatePrice and ListPrices:
// prices.go; DefineMeter, GetMeter and ListMeters: meters.go) and its
// background work (Run: run.go, publishing pending meter definitions and
// the schedule watermarks of watermark.go). The meter consumes no events.
package app

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Producer names the meter in the envelopes it builds.
const Producer = "meter"

// Deps are what the App uses and does not own, given once to New.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger // nil: discard
	// Clock is "now": the service's configured clock (service.Deps.Clock,
	// decision 0015) or a test's; nil: time.Now.
	Clock func() time.Time
}

// Config is the App's settings. The service reads them from service.Env
// (meter.Build); a zero field takes its default.
type Config struct {
	// ScheduleLead is how far ahead of now a series' schedule watermark is
	// published (METER_SCHEDULE_LEAD; DefaultScheduleLead, decision 0011): a
	// price activated without effectiveAt takes effect at most this long
	// after its activation, and a rater that receives the watermark within
	// it never waits for it. NoScheduleLead publishes no lead at all: the
	// watermark is the activation time itself (tests).
	ScheduleLead time.Duration
	// WatermarkInterval is how often Run publishes pending meter
	// definitions and the watermarks about to run out
	// (METER_WATERMARK_INTERVAL; DefaultWatermarkInterval).
	WatermarkInterval time.Duration
	// MaxSeries is how many price series (meter and currency) one tenant
	// may have (METER_MAX_PRICE_SERIES; DefaultMaxSeries): the activation
	// that would start one more is refused 422 limit_exceeded. Each series
	// costs the schedule's watermarks (decision 0011), so no tenant may
	// create them without bound.
	MaxSeries int
	// MaxEntries is how many price entries (a series' dimension set, the
	// default's included) one tenant may have (METER_MAX_PRICE_ENTRIES;
	// DefaultMaxEntries), and MaxMonthlyVersions how many of its price
	// versions may take effect in one UTC month
	// (METER_MAX_PRICE_VERSIONS_PER_MONTH; DefaultMaxMonthlyVersions): past
	// either an activation is refused 422 limit_exceeded. Together they
	// bound a period's lines from the tenant's prices to MaxEntries +
	// 2*MaxMonthlyVersions (decision 0014).
	MaxEntries, MaxMonthlyVersions int
	// MaxPlanVersions is how many versions of one plan may take effect in
	// one UTC month (METER_MAX_PLAN_VERSIONS_PER_MONTH;
	// DefaultMaxPlanVersions): past it a publication is refused 422
	// limit_exceeded. With billing's subscriptions per period it bounds a
	// period's lines priced by a plan (decision 0014).
	MaxPlanVersions int
}

// Defaults of Config's fields.
const (
	DefaultScheduleLead       = 5 * time.Second
	DefaultWatermarkInterval  = time.Second
	DefaultMaxSeries          = 1000
	DefaultMaxEntries         = 3000
	DefaultMaxMonthlyVersions = 2000
	DefaultMaxPlanVersions    = 2
)

// NoScheduleLead is the Config.ScheduleLead of no lead (a zero one takes
// the default; the service's settings only take positive durations).
const NoScheduleLead time.Duration = -1

// App runs the meter's commands and background work against its database.
type App struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time
	lead time.Duration
	cfg  Config
}

// New returns the App of d and c.
func New(d Deps, c Config) *App {
	if c.MaxSeries <= 0 {
		c.MaxSeries = DefaultMaxSeries
	}
	if c.MaxEntries <= 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.MaxMonthlyVersions <= 0 {
		c.MaxMonthlyVersions = DefaultMaxMonthlyVersions
	}
	if c.MaxPlanVersions <= 0 {
		c.MaxPlanVersions = DefaultMaxPlanVersions
	}
	a := &App{pool: d.Pool, log: d.Logger, now: d.Clock, cfg: c}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	switch {
	case c.ScheduleLead == 0:
		a.lead = DefaultScheduleLead
	case c.ScheduleLead > 0:
		a.lead = c.ScheduleLead
	}
	if a.cfg.WatermarkInterval <= 0 {
		a.cfg.WatermarkInterval = DefaultWatermarkInterval
	}
	return a
}
