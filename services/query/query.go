// Package query is the query service: it projects every public event
// (prices, usage, charges, adjustments, closes, invoices, corrections) into a
// per-event table, kept for reconciliation by origin event id, and into
// tenant summaries served over HTTP.
package query

import (
	"context"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	"github.com/usagebilling/billing/services/query/migrations"
)

// Spec is the query service for service.Main.
var Spec = service.Spec{
	Name:        "query",
	DefaultPort: 8085,
	Migrations:  []pgmigrate.Set{migrations.Set},
	Build:       Build,
}

// Build wires the projection consumer and the HTTP API.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	api := httpapi.New(app.NewReader(d.Pool), d.Logger)
	return service.Parts{Routes: api.Routes, Topics: app.Topics, Handlers: app.Handlers()}, nil
}
