// Package meter is the meter service: it owns immutable price versions and
// publishes PriceActivated on meter.events.v1. Spec is everything
// service.Main needs.
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

// Build wires the meter's HTTP API; the meter consumes no events.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	api := httpapi.New(app.New(d.Pool, d.Logger), d.Logger)
	return service.Parts{Routes: api.Routes}, nil
}
