// Package meter is the meter service: it owns the meter catalog
// (MeterDefined) and the tenants' immutable price versions
// (PriceActivated), and publishes them on meter.events.v1 with each price
// series' schedule watermark (PriceScheduleWatermark, decision 0011). Spec
// is everything service.Main needs.
package meter

import (
	"context"

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

// Build wires the meter's HTTP API and its background loop (app.Run:
// pending meter definitions and schedule watermarks); the meter consumes
// no events. METER_SCHEDULE_LEAD (default 5s) is how far ahead of now a
// series' schedule is published, METER_WATERMARK_INTERVAL (default 1s) how
// often the loop runs.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	env := service.NewEnv()
	cfg := app.Config{
		ScheduleLead:       env.Duration("METER_SCHEDULE_LEAD", app.DefaultScheduleLead),
		WatermarkInterval:  env.Duration("METER_WATERMARK_INTERVAL", app.DefaultWatermarkInterval),
		MaxSeries:          env.Int("METER_MAX_PRICE_SERIES", app.DefaultMaxSeries),
		MaxEntries:         env.Int("METER_MAX_PRICE_ENTRIES", app.DefaultMaxEntries),
		MaxMonthlyVersions: env.Int("METER_MAX_PRICE_VERSIONS_PER_MONTH", app.DefaultMaxMonthlyVersions),
		MaxPlanVersions:    env.Int("METER_MAX_PLAN_VERSIONS_PER_MONTH", app.DefaultMaxPlanVersions),
	}
	if err := env.Err(); err != nil {
		return service.Parts{}, err
	}
	now, err := d.Clock()
	if err != nil {
		return service.Parts{}, err
	}
	a := app.New(app.Deps{Pool: d.Pool, Logger: d.Logger, Clock: now}, cfg)
	api := httpapi.New(a, d.Logger)
	return service.Parts{
		Routes:         api.Routes,
		Work:           a.Run,
		Reconciliation: a.Reconciliation(),
	}, nil
}
