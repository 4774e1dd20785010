package deploy

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/testkit/pgcluster"
)

const initSQL = "postgres/init-databases.sql"

var (
	createRole = regexp.MustCompile(`(?i)^CREATE ROLE (\w+) LOGIN PASSWORD '([^']*)'$`)
	createDB   = regexp.MustCompile(`(?i)^CREATE DATABASE (\w+) OWNER (\w+)$`)
)

// initStatements returns the statements of the init script, one by one (as
// psql runs them: CREATE DATABASE cannot share a transaction).
func initStatements(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(initSQL)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
			lines = append(lines, l)
		}
	}
	var out []string
	for _, s := range strings.Split(strings.Join(lines, " "), ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// TestInitScriptMatchesDatabaseURLs checks each service's DATABASE_URL names
// a database the init script creates, owned by the URL's user, whose password
// it sets; and that the script is what the postgres container runs.
func TestInitScriptMatchesDatabaseURLs(t *testing.T) {
	p := loadCompose(t)
	roles := map[string]string{}  // role -> password
	owners := map[string]string{} // database -> owner
	for _, s := range initStatements(t) {
		if m := createRole.FindStringSubmatch(s); m != nil {
			roles[m[1]] = m[2]
		}
		if m := createDB.FindStringSubmatch(s); m != nil {
			owners[m[1]] = m[2]
		}
	}
	for _, spec := range specs {
		db, user, password := dbName(t, migrateConfig(t, p, spec).DatabaseMigrateURL)
		owner, ok := owners[db]
		switch {
		case !ok:
			t.Errorf("%s: database %q is not created by %s", migrateService(spec), db, initSQL)
		case owner != user:
			t.Errorf("%s: migrates as %q database %q owned by %q", migrateService(spec), user, db, owner)
		case roles[user] != password:
			t.Errorf("%s: the password in DATABASE_MIGRATE_URL is not the one %s sets for %q", migrateService(spec), initSQL, user)
		}
		_, user, password = dbName(t, serviceConfig(t, p, spec).DatabaseURL)
		if pw, ok := roles[user]; !ok || pw != password {
			t.Errorf("%s: runs as %q, a role %s does not create with the password of DATABASE_URL", spec.Name, user, initSQL)
		}
	}
	pg := composeService(t, p, pgService)
	if !mounts(pg, initSQL, "/docker-entrypoint-initdb.d/10-init-databases.sql") {
		t.Errorf("%s does not mount %s into /docker-entrypoint-initdb.d", pgService, initSQL)
	}
}

// TestInitScriptOnRealPostgres runs the init script on a throwaway
// PostgreSQL as the superuser, as the postgres image does, then runs each
// service's `migrate` with its one-shot's environment (as the database's
// owner, not a superuser), and checks that each service's runtime role can
// connect, cannot disable a trigger, and cannot connect to another's
// database.
func TestInitScriptOnRealPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, MaxConnections: 50})
	if err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	t.Cleanup(func() {
		if err := cluster.Remove(context.Background()); err != nil {
			t.Errorf("remove cluster: %v", err)
		}
	})
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range initStatements(t) {
		if _, err := admin.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %q: %v", initSQL, s, err)
		}
	}
	_ = admin.Close(ctx)

	p := loadCompose(t)
	local := func(rawURL string) string {
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = fmt.Sprintf("127.0.0.1:%d", cluster.Port())
		return u.String()
	}
	urls := map[string]string{}
	dir := composeKeys(t)
	for _, spec := range specs {
		e := env(composeService(t, p, migrateService(spec)))
		for name, v := range e {
			if rest, ok := strings.CutPrefix(v, "/keys/"); ok {
				e[name] = filepath.Join(dir, rest)
			}
		}
		e["DATABASE_URL"], e["DATABASE_MIGRATE_URL"] = local(e["DATABASE_URL"]), local(e["DATABASE_MIGRATE_URL"])
		if err := service.Run(ctx, spec, []string{"migrate"}, service.NewEnvFrom(e)); err != nil {
			t.Errorf("%s: %v", migrateService(spec), err)
		}
		urls[spec.Name] = local(serviceConfig(t, p, spec).DatabaseURL)
		conn, err := pgx.Connect(ctx, urls[spec.Name])
		if err != nil {
			t.Errorf("%s: runtime role: %v", spec.Name, err)
			continue
		}
		if err := pgmigrate.Check(ctx, urls[spec.Name], spec.Sets()...); err != nil {
			t.Errorf("%s: the runtime role does not see the migrated schema: %v", spec.Name, err)
		}
		if _, err := conn.Exec(ctx, "ALTER TABLE outbox_event DISABLE TRIGGER ALL"); err == nil || !strings.Contains(err.Error(), "must be owner") {
			t.Errorf("%s: runtime role disabling triggers: %v, want must be owner", spec.Name, err)
		}
		_ = conn.Close(ctx)
	}
	// meter's role on usage's database.
	u, _ := url.Parse(urls["usage"])
	mu, _ := url.Parse(urls["meter"])
	u.User = mu.User
	conn, err := pgx.Connect(ctx, u.String())
	if err == nil {
		_ = conn.Close(ctx)
		t.Errorf("meter's role can connect to usage's database")
	} else if !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("meter's role on usage's database: %v, want permission denied", err)
	}
}
