package deploy

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/pgcluster"
	"github.com/usagebilling/billing/pkg/pgmigrate"
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
		cfg := serviceConfig(t, p, spec)
		db, user, password := dbName(t, cfg.DatabaseURL)
		owner, ok := owners[db]
		switch {
		case !ok:
			t.Errorf("%s: database %q is not created by %s", spec.Name, db, initSQL)
		case owner != user:
			t.Errorf("%s: connects as %q to database %q owned by %q", spec.Name, user, db, owner)
		case roles[user] != password:
			t.Errorf("%s: the password in DATABASE_URL is not the one %s sets for %q", spec.Name, initSQL, user)
		}
	}
	pg := composeService(t, p, pgService)
	if !mounts(pg, initSQL, "/docker-entrypoint-initdb.d/10-init-databases.sql") {
		t.Errorf("%s does not mount %s into /docker-entrypoint-initdb.d", pgService, initSQL)
	}
}

// TestInitScriptOnRealPostgres runs the init script on a throwaway
// PostgreSQL as the superuser, as the postgres image does, then migrates each
// service's database as the service's own role (not a superuser), and checks
// that a service cannot connect to another's database.
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
	for _, spec := range specs {
		dbURL := local(serviceConfig(t, p, spec).DatabaseURL)
		urls[spec.Name] = dbURL
		if err := pgmigrate.Up(dbURL, spec.Sets()...); err != nil {
			t.Errorf("%s: migrations as the service's role: %v", spec.Name, err)
		}
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
