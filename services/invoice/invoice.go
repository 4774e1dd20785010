// Package invoice is the invoice service: it records billing's charges and
// adjustments against one invoice per tenant, period and currency, issues a
// period's invoices when billing's close proves them complete (charge lines
// aggregated per meter and price version, rounded once, half-even, with the
// difference as its own line, numbered gap-free per tenant), turns
// adjustments after issue into correction notes, and publishes the bounded
// InvoiceIssued and InvoiceCorrectionIssued through its outbox. Each issue
// also records a webhook intent per endpoint of the tenant, which the
// webhook worker delivers, signed, after commit (internal/webhook).
package invoice

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/document"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
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
	// invoice_charge's months ahead (decision 0025, facts by month).
	MonthTables: []monthpart.Table{migrations.ChargeMonths},
}

// EnvNames are the variables Build reads beyond service.EnvNames: the
// webhooks', the documents' seller and the invoice limits (for the checks
// of deploy/).
var EnvNames = slices.Concat(webhook.EnvNames, document.EnvNames, []string{
	"INVOICE_MAX_CREDIT_GRANTS", "INVOICE_MAX_ALERTS", "INVOICE_CLOSE_CHUNK", "INVOICE_CLOSE_CHUNKS_PER_ATTEMPT",
	"INVOICE_PARTS_FOLD_AT",
})

// SealsWebhookSecrets reports whether env's WEBHOOK_SECRET_KEYS seals the
// webhook endpoints' signing secrets at rest, as Build would read it; the
// error names the webhook settings Build would refuse.
func SealsWebhookSecrets(env *service.Env) (bool, error) {
	c, err := webhook.LoadConfig(env)
	return c.SecretKeys != nil, err
}

// Build wires the App (the consumer of billing's events and the reads), the
// HTTP API and the webhook delivery worker (settings from the environment:
// webhook.LoadConfig, and the documents' seller: document.LoadSeller).
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	now, err := d.Clock()
	if err != nil {
		return service.Parts{}, err
	}
	// Every setting checked before any is refused: one error lists them all.
	hooks, hooksErr := webhook.LoadConfig(service.NewEnv())
	if hooksErr == nil {
		hooksErr = hooks.CheckSealed(d.Config.HTTPAddr)
	}
	seller, sellerErr := document.LoadSeller(service.NewEnv())
	env := service.NewEnv()
	maxGrants := env.Int("INVOICE_MAX_CREDIT_GRANTS", app.DefaultMaxGrants)
	maxAlerts := env.Int("INVOICE_MAX_ALERTS", app.DefaultMaxAlerts)
	closeChunk := env.Int("INVOICE_CLOSE_CHUNK", app.DefaultCloseChunk)
	closeChunks := env.Int("INVOICE_CLOSE_CHUNKS_PER_ATTEMPT", app.DefaultCloseChunksPerAttempt)
	foldAt := env.Int("INVOICE_PARTS_FOLD_AT", app.DefaultPartsFoldAt)
	var chunkErr, chunksErr, foldErr error
	if closeChunk < 1 || closeChunk > app.MaxCloseChunk {
		chunkErr = fmt.Errorf("INVOICE_CLOSE_CHUNK: want a number of charges from 1 to %d, got %d", app.MaxCloseChunk, closeChunk)
	}
	if closeChunks < 1 || closeChunks > 1000 {
		chunksErr = fmt.Errorf("INVOICE_CLOSE_CHUNKS_PER_ATTEMPT: want a number of chunks from 1 to 1000, got %d", closeChunks)
	}
	if foldAt < 1 || foldAt > app.MaxPartsFoldAt {
		foldErr = fmt.Errorf("INVOICE_PARTS_FOLD_AT: want a number of parts from 1 to %d, got %d", app.MaxPartsFoldAt, foldAt)
	}
	if err := errors.Join(hooksErr, sellerErr, env.Err(), chunkErr, chunksErr, foldErr); err != nil {
		return service.Parts{}, err
	}
	a := app.New(app.Deps{Pool: d.Pool, Logger: d.Logger, Clock: now},
		app.Config{WebhookTTL: hooks.TTL, MaxGrants: maxGrants, MaxAlerts: maxAlerts, CloseChunk: closeChunk,
			CloseChunksPerAttempt: closeChunks, PartsFoldAt: foldAt})
	worker, err := webhook.NewWorker(d.Pool, hooks, d.Logger, d.Metrics)
	if err != nil {
		return service.Parts{}, err
	}
	api := httpapi.New(a, seller, d.Logger)
	hookAPI := httpapi.NewWebhooks(webhook.NewEndpoints(d.Pool, hooks.MaxEndpoints, webhook.NewEgress(hooks, nil), hooks.SecretKeys), webhook.NewStore(d.Pool, hooks.TTL), d.Logger)
	var work func(context.Context) error
	if hooks.Worker {
		work = worker.Run
	}
	return service.Parts{
		Work: work,
		Routes: func(r chi.Router) {
			api.Routes(r)
			api.CreditRoutes(r)
			api.AlertRoutes(r)
			api.InternalCreditRoutes(r)
			hookAPI.Routes(r)
		},
		Topics:         app.Topics,
		Handlers:       a.Handlers(),
		BatchHandlers:  a.BatchHandlers(),
		Reconciliation: a.Reconciliation(),
	}, nil
}
