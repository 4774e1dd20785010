package httpapi

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
)

// Idempotency scopes: a key names one command within its scope.
func adjustmentsScope(tenantID string) string   { return "billing.adjustment/" + tenantID }
func closeScope(tenantID string) string         { return "billing.close/" + tenantID }
func settingsScope(tenantID string) string      { return "billing.settings/" + tenantID }
func subscriptionsScope(tenantID string) string { return "billing.subscriptions/" + tenantID }

// idempotent runs a command in one transaction (app.InTx): it claims the
// Idempotency-Key in scope (a replay answers the stored first reply), runs
// run and saves its status and body as the key's reply. An error of run
// leaves nothing written, the key included.
func (a *API) idempotent(ctx context.Context, scope string, cmd httpx.Command,
	run func(tx pgx.Tx) (status int, body any, err error)) (idempotency.Reply, error) {
	var rc idempotency.Reply
	err := a.svc.InTx(ctx, func(tx pgx.Tx) (err error) {
		rc, err = idempotency.Run(ctx, tx, scope, cmd.IdempotencyKey, cmd.RequestHash, func() (int, any, error) { return run(tx) })
		return err
	})
	return rc, err
}

// steps is the key of a command the App runs in several transactions
// (app.Key): its answer is stored and sent with status.
func steps(scope string, cmd httpx.Command, status int) *idempotency.Steps {
	return &idempotency.Steps{Scope: scope, Key: cmd.IdempotencyKey, RequestHash: cmd.RequestHash, Status: status}
}
