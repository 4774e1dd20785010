// Package billing wires the billing service: it replicates price evidence,
// rates every usage fact exactly once into an immutable charge, takes
// adjustments and closes billing periods, and publishes ChargeRated,
// AdjustmentPosted and BillingPeriodClosed on billing.events.v1.
package billing

import (
	"context"

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
	svc := app.New(d.Pool, d.Logger)
	return service.Parts{
		Routes:         httpapi.New(svc, d.Logger).Routes,
		Topics:         app.Topics,
		Handlers:       svc.Handlers(),
		BatchHandlers:  svc.BatchHandlers(),
		Reconciliation: svc.Reconciliation(),
	}, nil
}
