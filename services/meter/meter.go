// Package meter is the meter service: it owns immutable price versions and
// publishes PriceActivated on meter.events.v1, and each price series'
// schedule watermark (PriceScheduleWatermark, decision 0011). Spec is
// everything service.Main needs.
package meter

import (
	"context"
	"time"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/httpapi"
	"github.com/usagebilling/billing/services/meter/migrations"
)

// Spec describes the meter service.
var Spec = service.Spec{
	Name:        "meter",
	DefaultPort: 8081,
	Migrations:  []pgmigrate.Set{migrations.Set},
	Build:       Build,
}

// Build wires the meter's HTTP API and the watermark publisher; the meter
// consumes no events. METER_SCHEDULE_LEAD (default 5s) is how far ahead of
// now a series' schedule is published, METER_WATERMARK_INTERVAL (default
// 1s) how often the publisher looks for watermarks about to run out.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	env := service.NewEnv()
	lead := env.Duration("METER_SCHEDULE_LEAD", app.DefaultScheduleLead)
	interval := env.Duration("METER_WATERMARK_INTERVAL", time.Second)
	if err := env.Err(); err != nil {
		return service.Parts{}, err
	}
	now, err := d.Clock()
	if err != nil {
		return service.Parts{}, err
	}
	a := app.New(d.Pool, d.Logger, app.WithScheduleLead(lead), app.WithClock(now))
	api := httpapi.New(a, d.Logger)
	return service.Parts{
		Routes:         api.Routes,
		Work:           func(ctx context.Context) error { return a.Run(ctx, interval) },
		Reconciliation: a.Reconciliation(),
	}, nil
}
