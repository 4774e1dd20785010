package pgmigrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Two roles per service database:
//
//   - the owner, which owns the database and every table, runs the
//     migrations (`<service> migrate`, with DATABASE_MIGRATE_URL);
//   - the runtime role the service runs as (DATABASE_URL), with DML only:
//     SELECT, INSERT, UPDATE and DELETE on the tables, USAGE on the
//     sequences, SELECT alone on the migration tables. It owns nothing, so
//     it cannot ALTER, DROP or DISABLE TRIGGER on a table (the immutability
//     triggers stay on).
//
// Grant gives the runtime role those rights, on today's tables and, through
// default privileges of the owner, on the tables later migrations create.

// Grant gives role the runtime rights on the current schema of the database
// at ownerURL (connected as the owner, the role that runs the migrations of
// sets), now and for the tables and sequences the owner creates later. It is
// idempotent; `migrate` runs it after every Up.
func Grant(ctx context.Context, ownerURL, role string, sets ...Set) error {
	conn, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		return fmt.Errorf("grant runtime role: connect as owner: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("grant runtime role: current schema: %w", err)
	}
	r, s := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	stmts := []string{
		"GRANT USAGE ON SCHEMA " + s + " TO " + r,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + s + " TO " + r,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + s + " TO " + r,
		"ALTER DEFAULT PRIVILEGES IN SCHEMA " + s + " GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO " + r,
		"ALTER DEFAULT PRIVILEGES IN SCHEMA " + s + " GRANT USAGE ON SEQUENCES TO " + r,
		// Nothing of the owner's beyond DML: no TRUNCATE, REFERENCES or
		// TRIGGER granted earlier by hand.
		"REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA " + s + " FROM " + r,
	}
	for _, set := range withNeeds(sets) {
		// The version of a migration set is read at start, never written.
		stmts = append(stmts, "REVOKE INSERT, UPDATE, DELETE ON "+pgx.Identifier{set.Table}.Sanitize()+" FROM "+r)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("grant runtime role: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit a no-op
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("grant runtime role %s: %s: %w", role, q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("grant runtime role %s: %w", role, err)
	}
	return nil
}

// CanMigrate reports whether the user of databaseURL owns its database or is
// a superuser: a role that may run migrations. A runtime role may not.
func CanMigrate(ctx context.Context, databaseURL string) (bool, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return false, fmt.Errorf("connect to database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	err = conn.QueryRow(ctx, `SELECT r.rolsuper OR d.datdba = r.oid
		FROM pg_roles r, pg_database d WHERE r.rolname = current_user AND d.datname = current_database()`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check database ownership: %w", err)
	}
	return ok, nil
}

// ErrNotMigrated is wrapped by Check when a set's migrations have not all
// been applied.
var ErrNotMigrated = errors.New("database schema is not migrated to this build's version")

// Check returns nil when every set is migrated to at least its newest
// version, clean; otherwise an error wrapping ErrNotMigrated that names the
// set and its version. It only reads, so a runtime role can run it.
func Check(ctx context.Context, databaseURL string, sets ...Set) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range withNeeds(sets) {
		want, err := Latest(s)
		if err != nil {
			return err
		}
		var version int64
		var dirty bool
		err = conn.QueryRow(ctx, "SELECT version, dirty FROM "+pgx.Identifier{s.Table}.Sanitize()+" LIMIT 1").Scan(&version, &dirty)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
			return fmt.Errorf("%w: %s has no migrations applied (want version %d)", ErrNotMigrated, s.Table, want)
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s has no migrations applied (want version %d)", ErrNotMigrated, s.Table, want)
		case err != nil:
			return fmt.Errorf("read migration version of %s: %w", s.Table, err)
		case dirty:
			return fmt.Errorf("%w: %s is dirty at version %d (a migration failed half-way)", ErrNotMigrated, s.Table, version)
		case version < int64(want):
			return fmt.Errorf("%w: %s is at version %d, this build needs %d", ErrNotMigrated, s.Table, version, want)
		}
	}
	return nil
}

var migrationFile = regexp.MustCompile(`^([0-9]+)_.*\.up\.sql$`)

// Latest returns the newest version among the set's up migrations.
func Latest(s Set) (uint64, error) {
	entries, err := fs.ReadDir(s.FS, s.Dir)
	if err != nil {
		return 0, fmt.Errorf("read migrations %s: %w", s.Table, err)
	}
	var latest uint64
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		latest = max(latest, v)
	}
	return latest, nil
}

// User returns the user name of a postgres:// URL ("" when it has none).
func User(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || u.User == nil {
		return ""
	}
	return u.User.Username()
}
