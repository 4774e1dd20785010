package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(m))
}

var facts = pgtest.Template{Name: "facts", Migrate: migrateFacts}

func migrateFacts(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE facts (id text PRIMARY KEY); INSERT INTO facts VALUES ('seed')`)
	return err
}

// leaky leaves a connection open, as a careless Migrate might.
var leaky = pgtest.Template{
	Name: "leaky/Template-With.Odd chars",
	Migrate: func(ctx context.Context, databaseURL string) error {
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return err
		}
		_, err = conn.Exec(ctx, `CREATE TABLE t (id int)`)
		return err // conn left open on purpose
	},
}

var seq atomic.Int32 // -count=N runs each test N times in one process

func ids(t *testing.T, databaseURL string) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), databaseURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), "SELECT id FROM facts ORDER BY id")
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	return got
}

func TestCloneIsolation(t *testing.T) {
	a := pgtest.NewPool(t, facts)
	bURL := pgtest.NewDB(t, facts)

	if _, err := a.Exec(t.Context(), "INSERT INTO facts VALUES ('only-in-a')"); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if got := strings.Join(ids(t, bURL), ","); got != "seed" {
		t.Fatalf("database b holds %q, want only the template's seed row", got)
	}
	var n int
	if err := a.QueryRow(t.Context(), "SELECT count(*) FROM facts").Scan(&n); err != nil || n != 2 {
		t.Fatalf("database a holds %d rows (err %v), want 2", n, err)
	}
}

func TestTemplateMigratedOnce(t *testing.T) {
	// A template of its own, so that the parallel tests below race to
	// create it.
	var migrations atomic.Int32
	once := pgtest.Template{
		Name: fmt.Sprintf("once-%d", seq.Add(1)),
		Migrate: func(ctx context.Context, databaseURL string) error {
			migrations.Add(1)
			return migrateFacts(ctx, databaseURL)
		},
	}
	t.Run("group", func(t *testing.T) {
		for i := range 8 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				u := pgtest.NewDB(t, once)
				if got := strings.Join(ids(t, u), ","); got != "seed" {
					t.Errorf("clone holds %q, want seed", got)
				}
			})
		}
	})
	if n := migrations.Load(); n != 1 {
		t.Fatalf("template migrated %d times, want 1", n)
	}
}

func TestDatabaseDroppedAfterTest(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		conn, err := pgx.Connect(t.Context(), pgtest.NewDB(t, facts))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context()) // left open: the drop must force it
		if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	admin, err := pgx.Connect(t.Context(), pgtest.NewDB(t, facts))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(t.Context())
	var exists bool
	if err := admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestTemplateWithOpenConnectionClones(t *testing.T) {
	for range 2 {
		pgtest.NewDB(t, leaky)
	}
}

func TestCluster(t *testing.T) {
	if os.Getenv(pgtest.EnvDatabaseURL) != "" {
		t.Skip("no throwaway cluster with " + pgtest.EnvDatabaseURL)
	}
	c := pgtest.Cluster(t)
	if c.Port() == 0 || !strings.Contains(pgtest.NewDB(t, facts), fmt.Sprintf(":%d/", c.Port())) {
		t.Fatalf("NewDB does not use the cluster on port %d", c.Port())
	}
}

// TestProcessesShareServer runs this package's tests in two processes at
// once against one server given by TEST_DATABASE_URL, as CI does when
// several packages' test binaries share a database server.
func TestProcessesShareServer(t *testing.T) {
	if os.Getenv(pgtest.EnvDatabaseURL) != "" {
		t.Skip("already a child process")
	}
	serverURL := pgtest.Cluster(t).URL("postgres")
	cmds := make([]*exec.Cmd, 2)
	outs := make([]strings.Builder, 2)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^(TestCloneIsolation|TestTemplateMigratedOnce|TestDatabaseDroppedAfterTest|TestTemplateWithOpenConnectionClones)$", "-test.count=3")
		cmds[i].Env = append(os.Environ(), pgtest.EnvDatabaseURL+"="+serverURL)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("process %d: %v\n%s", i, err, outs[i].String())
		}
	}
	// Both processes dropped what they created.
	conn, err := pgx.Connect(t.Context(), serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var left []string
	rows, err := conn.Query(t.Context(), "SELECT datname FROM pg_database WHERE datname LIKE 'pgtest%' AND datname NOT LIKE $1", fmt.Sprintf("%%\\_%d\\_%%", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("child processes left databases behind: %v", left)
	}
}
