// Package invoice is the invoice service: it records billing's charges and
// adjustments against one invoice per tenant, period and currency, issues a
// period's invoices when billing's close proves them complete (charge lines
// aggregated per meter and price version, rounded once, half-even, with the
// difference as its own line, numbered gap-free per tenant), turns
// adjustments after issue into correction notes, and publishes the bounded
// InvoiceIssued and InvoiceCorrectionIssued through its outbox.
package invoice

import (
	"context"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	"github.com/usagebilling/billing/services/invoice/migrations"
)

// Spec is the invoice service for service.Main.
var Spec = service.Spec{
	Name:        "invoice",
	DefaultPort: 8084,
	Migrations:  []pgmigrate.Set{migrations.Set},
	Build:       Build,
	// One charge, adjustment line or correction per origin event, one close
	// per tenant and period. Any other unique violation is a conflict.
	OriginConstraints: app.OriginConstraints,
}

// Build wires the consumer and the HTTP API.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	reader := app.NewReader(d.Pool)
	consumer := app.NewConsumer(d.Logger)
	return service.Parts{
		Routes:        httpapi.New(reader, d.Logger).Routes,
		Topics:        app.Topics,
		Handlers:      consumer.Handlers(),
		BatchHandlers: consumer.BatchHandlers(),
		Reconcile:     reader.ReconciliationRows,
	}, nil
}
