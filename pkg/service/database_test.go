package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// ledgerSet is a service schema with an immutability trigger, as the
// services' money tables have.
var ledgerSet = pgmigrate.Set{Table: "ledger_schema_migrations", Dir: "m", FS: fstest.MapFS{
	"m/0001_ledger.up.sql": {Data: []byte(`
CREATE TABLE ledger (id bigserial PRIMARY KEY, amount numeric NOT NULL);
CREATE FUNCTION ledger_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'ledger rows are immutable' USING ERRCODE = 'P0001'; END $$;
CREATE TRIGGER ledger_immutable BEFORE UPDATE OR DELETE ON ledger FOR EACH ROW EXECUTE FUNCTION ledger_immutable();`)},
	"m/0001_ledger.down.sql": {Data: []byte(`DROP TABLE ledger; DROP FUNCTION ledger_immutable();`)},
}}

// twoRoles creates an owner role owning a new empty database and a runtime
// role, and returns their URLs.
func twoRoles(t *testing.T) (ownerURL, runtimeURL string) {
	t.Helper()
	adminURL := pgtest.NewDB(t, pgtest.Template{Name: "empty", Migrate: func(context.Context, string) error { return nil }})
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	owner, runtime := "owner_"+hex.EncodeToString(suffix), "app_"+hex.EncodeToString(suffix)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE ROLE " + owner + " LOGIN", "CREATE ROLE " + runtime + " LOGIN",
		"ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER TO " + owner,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		// Before the database is dropped (cleanups run last first): what
		// the roles own and their grants go, then the roles.
		ctx := context.Background()
		c, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Errorf("drop roles: %v", err)
			return
		}
		defer c.Close(ctx)
		for _, q := range []string{
			"ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER TO CURRENT_USER",
			"DROP OWNED BY " + runtime, "DROP OWNED BY " + owner, "DROP ROLE " + runtime, "DROP ROLE " + owner,
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	return asUser(t, adminURL, owner), asUser(t, adminURL, runtime)
}

func asUser(t *testing.T, rawURL, user string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// TestRuntimeRoleIsDMLOnly runs `migrate` as the owner, then shows the
// runtime role can do a service's work (insert and read the tables,
// including those the owner creates later) but cannot disable the
// immutability trigger, drop or truncate a table, create one, or move the
// migration version; and that the service started as the runtime role
// does not migrate: it refuses to start before `migrate`, and runs after.
func TestRuntimeRoleIsDMLOnly(t *testing.T) {
	ctx := t.Context()
	ownerURL, runtimeURL := twoRoles(t)
	spec := Spec{Name: "svc", DefaultPort: 1, Migrations: []pgmigrate.Set{ledgerSet},
		Build: func(context.Context, Deps) (Parts, error) { return Parts{}, nil }}
	brokers := kafkatest.Brokers(t)
	env := func(extra map[string]string) *Env {
		m := map[string]string{"DATABASE_URL": runtimeURL, "AUTH_DEV_KEY": "true", "KAFKA_BROKERS": strings.Join(brokers, ",")}
		for k, v := range extra {
			m[k] = v
		}
		return NewEnvFrom(m)
	}

	// Before migrate: the runtime role does not migrate, it refuses to start.
	err := Run(ctx, spec, nil, env(nil))
	if !errors.Is(err, pgmigrate.ErrNotMigrated) || !strings.Contains(err.Error(), "run `svc migrate`") {
		t.Fatalf("serve before migrate: %v, want a refusal asking for `svc migrate`", err)
	}
	// Nor can it migrate itself.
	if err := Run(ctx, spec, []string{"migrate"}, env(nil)); err == nil {
		t.Fatal("the runtime role applied the migrations itself")
	}

	if err := Run(ctx, spec, []string{"migrate"}, env(map[string]string{"DATABASE_MIGRATE_URL": ownerURL})); err != nil {
		t.Fatalf("migrate as the owner: %v", err)
	}
	// Again: idempotent.
	if err := Run(ctx, spec, []string{"migrate"}, env(map[string]string{"DATABASE_MIGRATE_URL": ownerURL})); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	// A table a later migration creates (as the owner) is covered by the
	// default privileges.
	owner, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(context.WithoutCancel(ctx))
	if _, err := owner.Exec(ctx, "CREATE TABLE later (id bigserial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}

	rt, err := pgx.Connect(ctx, runtimeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		"INSERT INTO ledger (amount) VALUES (12.50)",
		"SELECT count(*) FROM ledger",
		"INSERT INTO later (note) VALUES ('covered by default privileges')",
		"UPDATE later SET note = 'updated'",
		"DELETE FROM later",
		"UPDATE outbox_shard SET shard = shard WHERE false", "DELETE FROM inbox_event WHERE false", "SELECT count(*) FROM idempotency_key",
		"SELECT version FROM ledger_schema_migrations",
	} {
		if _, err := rt.Exec(ctx, q); err != nil {
			t.Errorf("runtime role: %s: %v", q, err)
		}
	}
	if _, err := rt.Exec(ctx, "UPDATE ledger SET amount = 0"); pgCode(err) != "P0001" {
		t.Errorf("update of an immutable row: %v, want the trigger's refusal", err)
	}
	for _, q := range []string{
		"ALTER TABLE ledger DISABLE TRIGGER ledger_immutable",
		"ALTER TABLE ledger DISABLE TRIGGER ALL",
		"DROP TRIGGER ledger_immutable ON ledger",
		"DROP TABLE ledger",
		"TRUNCATE ledger",
		"ALTER TABLE ledger ADD COLUMN extra int",
		"CREATE TABLE mine (id int)",
		"UPDATE ledger_schema_migrations SET version = 0",
		"DELETE FROM ledger_schema_migrations",
		"SET session_replication_role = replica",
	} {
		if _, err := rt.Exec(ctx, q); pgCode(err) != "42501" { // insufficient_privilege
			t.Errorf("runtime role: %s: %v, want insufficient_privilege (42501)", q, err)
		}
	}
	if _, err := rt.Exec(ctx, "UPDATE ledger SET amount = 0"); pgCode(err) != "P0001" {
		t.Errorf("the trigger is no longer on: %v", err)
	}

	// After migrate the service starts as the runtime role and serves.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, spec, nil, env(map[string]string{"HTTP_ADDR": addr})) }()
	ready := false
	for !ready {
		select {
		case err := <-done:
			stop()
			t.Fatalf("service as the runtime role stopped: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := http.Get(fmt.Sprintf("http://%s/readyz", addr))
		if err == nil {
			ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("service as the runtime role: %v", err)
	}
}
