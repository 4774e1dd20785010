// Package usage is the usage service: it accepts usage facts once per
// (tenant, sourceSystem, sourceEventId) for meters the tenant has priced
// (the price evidence it replicates from meter.events.v1 says which, and in
// which currency), and publishes UsageAccepted on usage.events.v1. The price
// version of a fact is the rater's to decide (billing, decision 0011). Spec
// is everything service.Main needs.
package usage

import (
	"context"
	"errors"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/httpapi"
	"github.com/usagebilling/billing/services/usage/migrations"
)

// Spec describes the usage service.
var Spec = service.Spec{
	Name:        "usage",
	DefaultPort: 8082,
	Migrations:  []pgmigrate.Set{migrations.Set},
	Build:       Build,
	// A redelivered PriceActivated the inbox missed is absorbed by the
	// evidence's origin; any other unique violation is a conflict.
	OriginConstraints: []string{"price_evidence_event_id_key"},
}

// Build wires the HTTP API, the consumer of the meter's events, the
// publisher of usage's watermarks (UsageAcceptedThrough, decision 0014):
// USAGE_WATERMARK_INTERVAL (default 1s) is how often it cuts and publishes,
// and the upkeep of usage_fact's month partitions (decision 0025).
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	env := service.NewEnv()
	cfg := app.Config{WatermarkInterval: env.Duration("USAGE_WATERMARK_INTERVAL", app.DefaultWatermarkInterval)}
	if err := env.Err(); err != nil {
		return service.Parts{}, err
	}
	now, err := d.Clock()
	if err != nil {
		return service.Parts{}, err
	}
	a := app.New(app.Deps{Pool: d.Pool, Logger: d.Logger, Clock: now}, cfg)
	return service.Parts{
		Routes: httpapi.New(a, d.Logger).Routes,
		Work: func(ctx context.Context) error {
			p := &topicPartitions{brokers: d.Config.Brokers}
			defer p.close()
			months := make(chan error, 1)
			go func() { months <- a.RunMonths(ctx) }()
			err := a.RunWatermarks(ctx, p.count)
			return errors.Join(err, <-months)
		},
		Topics:         app.Topics,
		Handlers:       a.Handlers(),
		Reconciliation: a.Reconciliation(),
	}, nil
}
