// Package query is the query service: it projects every public event
// (prices, usage, charges, adjustments, closes, invoices, corrections) into a
// per-event table, kept for reconciliation by origin event id, into
// tenant summaries and into usage analytics (per meter, window and
// dimension) served over HTTP. It is also the one operator surface:
// the cross-service quarantine view (from the EventQuarantined notices on
// ops.events.v1), the audited redrives of retained events and of outbox
// dead letters (through ops.commands.v1), the recovery counts and the
// reconciliation, read from each service's internal endpoints at
// SERVICE_URLS.
package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/console"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	"github.com/usagebilling/billing/services/query/internal/operator"
	"github.com/usagebilling/billing/services/query/migrations"
)

// Spec is the query service for service.Main.
var Spec = service.Spec{
	Name:        operator.Self,
	DefaultPort: 8085,
	Migrations:  []pgmigrate.Set{migrations.Set},
	Build:       Build,
	// One projection per event, one notice per EventQuarantined, one audit
	// row per ops event and per redrive state.
	OriginConstraints: append([]string{"projected_event_pkey"}, operator.OriginConstraints...),
	// projected_event's and usage_fact's months ahead (decision 0025,
	// facts by month).
	MonthTables: []monthpart.Table{migrations.EventMonths, migrations.FactMonths},
}

// EnvNames are the variables Build reads beyond service.EnvNames (for the
// checks of deploy/).
var EnvNames = []string{"QUERY_FOLD_INTERVAL", "QUERY_FOLD_CHUNK", "QUERY_CONSOLE_CSRF_KEY_FILE", "QUERY_CONSOLE_SECURE_COOKIE"}

// consoleConfig reads the console's settings: QUERY_CONSOLE_SECURE_COOKIE,
// and the key in the file QUERY_CONSOLE_CSRF_KEY_FILE names (none: the
// console makes one for this process). A key shorter than
// console.MinCSRFKey is refused here, as console.New would.
func consoleConfig(env *service.Env) (console.Config, error) {
	c := console.Config{SecureCookie: env.Bool("QUERY_CONSOLE_SECURE_COOKIE", false)}
	keyFile := env.String("QUERY_CONSOLE_CSRF_KEY_FILE", "")
	if err := env.Err(); err != nil || keyFile == "" {
		return c, err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return c, fmt.Errorf("QUERY_CONSOLE_CSRF_KEY_FILE: %w", err)
	}
	c.CSRFKey = bytes.TrimSpace(key)
	if len(c.CSRFKey) < console.MinCSRFKey {
		return c, fmt.Errorf("QUERY_CONSOLE_CSRF_KEY_FILE %s: %d bytes, want at least %d", keyFile, len(c.CSRFKey), console.MinCSRFKey)
	}
	return c, nil
}

// ConsoleSettings reports what the console makes of env, as Build reads
// it: whether its form tokens are signed with a key from
// QUERY_CONSOLE_CSRF_KEY_FILE, which every replica given the same file
// shares, and whether its session cookie is Secure on plain HTTP
// (QUERY_CONSOLE_SECURE_COOKIE, for TLS ended in front of query). The
// error names a setting Build would refuse.
func ConsoleSettings(env *service.Env) (sharedKey, secureCookie bool, err error) {
	c, err := consoleConfig(env)
	return c.CSRFKey != nil, c.SecureCookie, err
}

// Build wires the projection and ops consumers, the tenant API and the
// operator API.
func Build(_ context.Context, d service.Deps) (service.Parts, error) {
	webhookAPI := httpapi.NewWebhookOperator(
		operator.NewWebhooks(d.Pool, d.Config.ServiceURLs[operator.WebhookService], d.Config.Auth, d.Logger), d.Logger)
	env := service.NewEnv()
	cfg := app.Config{FoldInterval: env.Duration("QUERY_FOLD_INTERVAL", app.DefaultFoldInterval),
		FoldChunk: env.Int("QUERY_FOLD_CHUNK", app.DefaultFoldChunk)}
	var chunkErr error
	if cfg.FoldChunk < 1 || cfg.FoldChunk > app.MaxFoldChunk {
		chunkErr = fmt.Errorf("QUERY_FOLD_CHUNK: want a number of summary deltas from 1 to %d, got %d", app.MaxFoldChunk, cfg.FoldChunk)
	}
	consoleCfg, consoleErr := consoleConfig(env) // with env.Err(): every setting read above
	if err := errors.Join(consoleErr, chunkErr); err != nil {
		return service.Parts{}, err
	}
	a := app.New(app.Deps{Pool: d.Pool, Logger: d.Logger, Metrics: d.Metrics}, cfg)
	op := operator.New(d.Pool, ops.NewClient(d.Config.ServiceURLs, d.Config.Auth, operator.Self), a.Reconciliation(), d.Logger)
	operatorAPI := httpapi.NewOperator(op, d.Logger)
	tenantAPI := httpapi.New(a, d.Logger)
	con, err := console.New(op, operator.NewWebhooks(d.Pool, d.Config.ServiceURLs[operator.WebhookService], d.Config.Auth, d.Logger),
		operator.NewAccounts(d.Config.ServiceURLs, d.Config.Auth), a, d.Config.Auth, consoleCfg, d.Logger)
	if err != nil {
		return service.Parts{}, fmt.Errorf("QUERY_CONSOLE_CSRF_KEY_FILE: %w", err)
	}
	handlers := map[string]inbox.Handler{}
	maps.Copy(handlers, op.Handlers())
	return service.Parts{
		Routes: func(r chi.Router) {
			tenantAPI.Routes(r)
			operatorAPI.Routes(r)
			webhookAPI.Routes(r)
			con.Routes(r)
		},
		Topics:         append(append([]string{}, app.Topics...), events.TopicOps),
		Handlers:       handlers,
		BatchHandlers:  a.BatchHandlers(),
		Reconciliation: a.Reconciliation(),
		// Summary deltas are folded in the background (QUERY_FOLD_INTERVAL),
		// in chunks of QUERY_FOLD_CHUNK.
		Work: a.RunFolder,
	}, nil
}
