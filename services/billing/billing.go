// Package billing wires the billing service: it replicates price evidence,
// rates every usage fact exactly once into an immutable charge, takes
// adjustments and closes billing periods, and publishes ChargeRated,
// AdjustmentPosted and BillingPeriodClosed on billing.events.v1.
package billing

import (
	"context"
	"fmt"
	"os"
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

// Build assembles billing from its dependencies.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	now, err := d.Clock()
	if err != nil {
		return service.Parts{}, err
	}
	svc := app.New(d.Pool, d.Logger)
	svc.SetClock(now)
	// A close waits for the usage accepted before it (decision 0014):
	// BILLING_CLOSE_WAIT (default 5s) is how long an HTTP close waits for
	// usage's watermarks before it answers 202 closing and leaves the rest
	// to the scheduler.
	env := service.NewEnv()
	closeWait := env.Duration("BILLING_CLOSE_WAIT", 5*time.Second)
	if err := env.Err(); err != nil {
		return service.Parts{}, err
	}
	svc.WaitForUsage(closeWait)
	if d.Metrics != nil {
		if err := svc.RegisterMetrics(d.Metrics); err != nil {
			return service.Parts{}, err
		}
	}
	interval, err := schedulerInterval()
	if err != nil {
		return service.Parts{}, err
	}
	api := httpapi.New(svc, d.Logger)
	return service.Parts{
		Routes: func(r chi.Router) {
			api.Routes(r)
			api.PeriodRoutes(r)
		},
		// The close scheduler (decision 0014): closes the periods whose end
		// plus grace has passed, on every instance (safe: see
		// app.CloseDuePeriods).
		Work: func(ctx context.Context) error {
			if interval == 0 {
				return nil
			}
			return svc.RunScheduler(ctx, interval)
		},
		Topics:         app.Topics,
		Handlers:       svc.Handlers(),
		BatchHandlers:  svc.BatchHandlers(),
		Reconciliation: svc.Reconciliation(),
	}, nil
}

// schedulerInterval is BILLING_CLOSE_INTERVAL (a Go duration, default 10s,
// at least 100ms): how often each instance looks for periods to close;
// "off" (0) runs no scheduler in this process (periods then close only when
// someone calls close, or another instance's scheduler closes them).
func schedulerInterval() (time.Duration, error) {
	v := os.Getenv("BILLING_CLOSE_INTERVAL")
	switch v {
	case "":
		return 10 * time.Second, nil
	case "off":
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 100*time.Millisecond {
		return 0, fmt.Errorf("BILLING_CLOSE_INTERVAL=%q: want a duration of at least 100ms such as 10s", v)
	}
	return d, nil
}
