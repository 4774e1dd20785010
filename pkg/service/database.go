package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

// migrate is `<service> migrate`: the migrations applied as the schema owner
// (DATABASE_MIGRATE_URL, or DATABASE_URL when the service runs as the owner
// itself), then the runtime role of DATABASE_URL granted DML on the tables,
// today's and those of later migrations (pgmigrate.Grant).
func migrate(ctx context.Context, spec Spec, cfg Config, log *slog.Logger) error {
	ownerURL := cfg.DatabaseMigrateURL
	if ownerURL == "" {
		ownerURL = cfg.DatabaseURL
	}
	if err := pgmigrate.Up(ownerURL, spec.Sets()...); err != nil {
		return err
	}
	owner, runtime := pgmigrate.User(ownerURL), pgmigrate.User(cfg.DatabaseURL)
	if runtime == "" || runtime == owner {
		log.Info("migrations applied", "owner", owner, "runtime_role", "(the owner itself)")
		return nil
	}
	if err := pgmigrate.Grant(ctx, ownerURL, runtime, spec.Sets()...); err != nil {
		return err
	}
	log.Info("migrations applied; runtime role granted DML", "owner", owner, "runtime_role", runtime)
	return nil
}

// prepareSchema runs before the service starts. Connected as the database's
// owner (a development stack or a test with one role), it migrates, as
// `migrate` would. As a runtime role it never migrates: it checks that
// `migrate` has brought the schema to this build's version and refuses to
// start otherwise.
func prepareSchema(ctx context.Context, spec Spec, cfg Config, log *slog.Logger) error {
	owner, err := pgmigrate.CanMigrate(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	if owner {
		log.Info("DATABASE_URL is the database's owner: migrating at start (run a DML-only role in production, see `migrate`)")
		return pgmigrate.Up(cfg.DatabaseURL, spec.Sets()...)
	}
	if err := pgmigrate.Check(ctx, cfg.DatabaseURL, spec.Sets()...); err != nil {
		if errors.Is(err, pgmigrate.ErrNotMigrated) {
			return fmt.Errorf("%w; run `%s migrate` with the owner's DATABASE_MIGRATE_URL first", err, spec.Name)
		}
		return err
	}
	return nil
}
