// Package billing wires the billing service: it replicates price evidence,
// rates every usage fact exactly once into an immutable charge, takes
// adjustments and closes billing periods, and publishes ChargeRated,
// AdjustmentPosted and BillingPeriodClosed on billing.events.v1.
package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing/internal/app"
	"github.com/usagebilling/billing/services/billing/internal/httpapi"
	"github.com/usagebilling/billing/services/billing/migrations"
)

// DefaultPort is billing's default HTTP port.
const DefaultPort = 8083

// Spec is the billing service for service.Main.
var Spec = service.Spec{
	Name:        "billing",
	DefaultPort: DefaultPort,
	Migrations:  []pgmigrate.Set{migrations.Set},
	Build:       Build,
	// One charge per UsageAccepted; evidence is inserted ON CONFLICT DO
	// NOTHING. Any other unique violation is a conflict.
	OriginConstraints: []string{"charge_usage_event_id_key", "price_evidence_event_id_key"},
}

// Build assembles billing from its dependencies. Its settings, besides the
// common ones: BILLING_CLOSE_WAIT (default 5s), how long an HTTP close waits
// for usage's watermarks before it answers 202 closing and leaves the rest
// to the scheduler (decision 0014); BILLING_CLOSE_INTERVAL (a duration of at
// least 100ms, default 10s, or "off"), how often each instance's close
// scheduler looks for due periods ("off": none in this process; periods
// then close when someone calls close, or by another instance's scheduler);
// BILLING_CLOSE_CHUNK (default 10000, 1 to 1000000), how many charges one
// transaction of a close's tally reads; BILLING_PARTS_FOLD_AT (default 32,
// 1 to 1000), how many parts a line of a period keeps before a batch folds
// them into one; BILLING_MAX_SUBSCRIPTIONS (default
// 8) and BILLING_MAX_ADJUSTMENTS (default 1000, 1 to 100000), a tenant's
// subscriptions in effect from the start of its current period on
// (scheduled ones included) and one period's adjustments.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	env := service.NewEnv()
	cfg := app.Config{WaitForUsage: true, CloseWait: env.Duration("BILLING_CLOSE_WAIT", app.DefaultCloseWait),
		MaxSubscriptions: env.Int("BILLING_MAX_SUBSCRIPTIONS", app.DefaultMaxSubscriptions),
		MaxAdjustments:   env.Int("BILLING_MAX_ADJUSTMENTS", app.DefaultMaxAdjustments),
		CloseChunk:       env.Int("BILLING_CLOSE_CHUNK", app.DefaultCloseChunk),
		PartsFoldAt:      env.Int("BILLING_PARTS_FOLD_AT", app.DefaultPartsFoldAt)}
	scheduler := env.String("BILLING_CLOSE_INTERVAL", "") != "off"
	if scheduler {
		cfg.CloseInterval = env.Duration("BILLING_CLOSE_INTERVAL", app.DefaultCloseInterval)
	}
	err := env.Err()
	if err == nil && scheduler && cfg.CloseInterval < minCloseInterval {
		err = fmt.Errorf("BILLING_CLOSE_INTERVAL: want a duration of at least %s such as 10s, or off, got %s", minCloseInterval, cfg.CloseInterval)
	}
	if err == nil && (cfg.CloseChunk < 1 || cfg.CloseChunk > maxCloseChunk) {
		err = fmt.Errorf("BILLING_CLOSE_CHUNK: want a number of charges from 1 to %d, got %d", maxCloseChunk, cfg.CloseChunk)
	}
	if err == nil && (cfg.PartsFoldAt < 1 || cfg.PartsFoldAt > app.MaxPartsFoldAt) {
		err = fmt.Errorf("BILLING_PARTS_FOLD_AT: want a number of parts from 1 to %d, got %d", app.MaxPartsFoldAt, cfg.PartsFoldAt)
	}
	if err == nil && (cfg.MaxAdjustments < 1 || cfg.MaxAdjustments > maxAdjustments) {
		err = fmt.Errorf("BILLING_MAX_ADJUSTMENTS: want a number of adjustments from 1 to %d, got %d", maxAdjustments, cfg.MaxAdjustments)
	}
	if err != nil {
		return service.Parts{}, err
	}
	now, err := d.Clock()
	if err != nil {
		return service.Parts{}, err
	}
	a := app.New(app.Deps{Pool: d.Pool, Logger: d.Logger, Clock: now}, cfg)
	if d.Metrics != nil {
		for _, c := range a.Collectors() {
			if err := d.Metrics.Register(c); err != nil {
				return service.Parts{}, fmt.Errorf("register close metrics: %w", err)
			}
		}
	}
	api := httpapi.New(a, d.Logger)
	return service.Parts{
		Routes: func(r chi.Router) {
			api.Routes(r)
			api.PeriodRoutes(r)
			api.SubscriptionRoutes(r)
			api.InternalSubscriptionRoutes(r)
		},
		// The close scheduler (decision 0014): closes the periods whose end
		// plus grace has passed, on every instance (safe: see
		// app.CloseDuePeriods).
		// And the upkeep of charge's month partitions (decision 0025), on
		// every instance.
		Work: func(ctx context.Context) error {
			months := make(chan error, 1)
			go func() { months <- a.RunMonths(ctx) }()
			var err error
			if scheduler {
				err = a.RunScheduler(ctx)
			} else {
				<-ctx.Done()
			}
			return errors.Join(err, <-months)
		},
		Topics:         app.Topics,
		Handlers:       a.Handlers(),
		BatchHandlers:  a.BatchHandlers(),
		Reconciliation: a.Reconciliation(),
	}, nil
}

// minCloseInterval is the shortest BILLING_CLOSE_INTERVAL.
const minCloseInterval = 100 * time.Millisecond

// maxCloseChunk is the largest BILLING_CLOSE_CHUNK: a chunk's statement
// must stay well inside DB_STATEMENT_TIMEOUT.
const maxCloseChunk = 1000000

// maxAdjustments is the largest BILLING_MAX_ADJUSTMENTS: the sums of a
// period's adjustments read at most that many rows.
const maxAdjustments = 100000
