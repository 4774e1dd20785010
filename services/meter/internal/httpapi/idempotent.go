package httpapi

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
)

// Idempotency scopes: a key names one command within its scope.
func pricesScope(tenantID string) string { return "meter/" + tenantID + "/prices" }

const metersScope = "meter/" + events.CatalogTenant + "/meters"

// idempotent runs an idempotent command in one transaction of the App
// (App.InTx): it claims the command's Idempotency-Key in scope (a replay
// answers the stored first reply, the key with another request
// idempotency.ErrKeyReused), runs run, and saves run's status and body as
// the key's reply. An error of run leaves nothing written, the key
// included: a refused request keeps no reply and its key can be used again.
func (api *API) idempotent(ctx context.Context, scope string, cmd httpx.Command,
	run func(tx pgx.Tx) (status int, body any, err error)) (idempotency.Reply, error) {
	var rc idempotency.Reply
	err := api.app.InTx(ctx, func(tx pgx.Tx) error {
		replay, err := idempotency.ClaimReply(ctx, tx, scope, cmd.IdempotencyKey, cmd.RequestHash)
		if err != nil {
			return err
		}
		if replay != nil {
			rc = *replay
			return nil
		}
		status, body, err := run(tx)
		if err != nil {
			return err
		}
		rc, err = idempotency.SaveReply(ctx, tx, scope, cmd.IdempotencyKey, status, body)
		return err
	})
	if err != nil {
		return idempotency.Reply{}, err
	}
	return rc, nil
}
