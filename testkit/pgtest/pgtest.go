// Package pgtest gives each test a real, freshly migrated PostgreSQL
// database. A Template is migrated once per test process into a template
// database; every NewDB clones it with CREATE DATABASE ... TEMPLATE, which
// takes milliseconds, and drops the clone when the test ends.
//
// The server is the one named by the environment variable TEST_DATABASE_URL
// if set (a superuser or CREATEDB role; several test binaries may share it);
// otherwise the first test that needs a database starts a throwaway
// pgcluster (fsync off) on a free port, which Main removes at the end:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// With goleak, and with kafkatest in the same package:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(kafkatest.Wrap(m))) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/pgsession"
	"github.com/usagebilling/billing/testkit/pgcluster"
)

// EnvDatabaseURL names the environment variable holding the URL of an
// existing server to use instead of a throwaway cluster.
const EnvDatabaseURL = "TEST_DATABASE_URL"

// Template describes a migrated database that tests clone.
type Template struct {
	// Name identifies the template within the test process; templates
	// with the same Name are migrated once, by the first Migrate given.
	Name string
	// Migrate brings the empty database at databaseURL to the schema the
	// tests need. It must close its connections before returning (any left
	// open are terminated).
	Migrate func(ctx context.Context, databaseURL string) error
}

// M is what Main and Wrap run; *testing.M satisfies it.
type M interface{ Run() int }

// Main runs the tests, then drops the templates this process created and
// removes the cluster it started, if any. It returns the exit code for
// os.Exit.
func Main(m M) int { return Wrap(m).Run() }

// Wrap returns an M that runs m and then cleans up like Main; use it to
// combine with goleak.VerifyTestMain or kafkatest.Wrap.
func Wrap(m M) M { return wrapped{m} }

type wrapped struct{ m M }

func (w wrapped) Run() int {
	code := w.m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: cleanup: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// NewDB returns the URL of a new database cloned from tmpl, which is
// migrated first if this process has not done so yet. The database is
// dropped (WITH (FORCE)) when the test ends.
func NewDB(t testing.TB, tmpl Template) string {
	t.Helper()
	s, err := getServer()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	tmplName, err := s.template(tmpl)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := fmt.Sprintf("pgtest_%s_%d", processID, dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sql := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", ident(name), ident(tmplName))
	if _, err := s.admin.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: clone %s from template %s: %v", name, tmpl.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop test database %s: %v", name, err)
		}
	})
	return s.url(name)
}

// NewPool returns a pool on a new database cloned from tmpl (see NewDB),
// its connections in the services' session (pgsession: binary codecs,
// planner settings), so that a test encodes and plans its statements as the
// services do; the pool is closed when the test ends.
func NewPool(t testing.TB, tmpl Template) *pgxpool.Pool {
	t.Helper()
	return NewPoolConns(t, tmpl, 0)
}

// NewPoolConns is NewPool with at most maxConns connections (pgx's default
// if 0), for tests that run more transactions at once than that.
func NewPoolConns(t testing.TB, tmpl Template, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewDB(t, tmpl))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pgsession.Configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // outlives t.Context (closed in Cleanup)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the drop registered by NewDB
	return pool
}

// Cluster returns the throwaway cluster of this test process, starting it
// if needed, for tests that stop or restart the server. It fails the test
// when TEST_DATABASE_URL is set, since there is then no cluster to control.
// The cluster is shared by the tests of the process: a test that stops it
// must start it again before it ends (t.Cleanup) and must not run in
// parallel with others.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if os.Getenv(EnvDatabaseURL) != "" {
		t.Fatalf("pgtest: %s is set, so there is no throwaway cluster to control; unset it to run this test", EnvDatabaseURL)
	}
	s, err := getServer()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s.cluster
}

// processID makes this process's database names unique among processes
// sharing a server.
var processID = func() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%d_%s", os.Getpid(), hex.EncodeToString(b))
}()

var dbSeq atomic.Int64

var (
	mu      sync.Mutex
	current *server // nil until first use
	initErr error
)

type server struct {
	cluster *pgcluster.Cluster // nil when TEST_DATABASE_URL is used
	base    *url.URL
	admin   *pgxpool.Pool

	mu        sync.Mutex
	templates map[string]*template
}

type template struct {
	once sync.Once
	name string
	err  error
}

func getServer() (*server, error) {
	mu.Lock()
	defer mu.Unlock()
	if current != nil || initErr != nil {
		return current, initErr
	}
	current, initErr = newServer()
	return current, initErr
}

func newServer() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &server{templates: map[string]*template{}}
	raw := os.Getenv(EnvDatabaseURL)
	if raw == "" {
		c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true})
		if err != nil {
			return nil, fmt.Errorf("start throwaway postgres (set %s to use an existing server): %w", EnvDatabaseURL, err)
		}
		s.cluster = c
		raw = c.URL("postgres")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", EnvDatabaseURL, err)
	}
	s.base = u
	s.admin, err = pgxpool.New(ctx, raw)
	if err == nil {
		err = s.admin.Ping(ctx)
	}
	if err != nil {
		if s.cluster != nil {
			_ = s.cluster.Remove(context.Background())
		}
		return nil, fmt.Errorf("connect to %s: %w", u.Redacted(), err)
	}
	return s, nil
}

// url returns the URL of database name on the server.
func (s *server) url(name string) string {
	u := *s.base
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// template returns the name of the migrated template database for tmpl,
// creating it on first use. Concurrent callers wait for the first.
func (s *server) template(tmpl Template) (string, error) {
	if tmpl.Name == "" || tmpl.Migrate == nil {
		return "", errors.New("template needs a Name and a Migrate func")
	}
	s.mu.Lock()
	tp, ok := s.templates[tmpl.Name]
	if !ok {
		tp = &template{name: templateName(tmpl.Name)}
		s.templates[tmpl.Name] = tp
	}
	s.mu.Unlock()
	tp.once.Do(func() { tp.err = s.createTemplate(tp.name, tmpl) })
	return tp.name, tp.err
}

func (s *server) createTemplate(name string, tmpl Template) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return fmt.Errorf("create template database for %s: %w", tmpl.Name, err)
	}
	if err := tmpl.Migrate(ctx, s.url(name)); err != nil {
		return fmt.Errorf("migrate template %s: %w", tmpl.Name, err)
	}
	// Cloning needs the template free of sessions: forbid new ones and end
	// any the migration left behind.
	if _, err := s.admin.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"); err != nil {
		return fmt.Errorf("seal template %s: %w", tmpl.Name, err)
	}
	if _, err := s.admin.Exec(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name); err != nil {
		return fmt.Errorf("close connections to template %s: %w", tmpl.Name, err)
	}
	return nil
}

func shutdown() error {
	mu.Lock()
	defer mu.Unlock()
	s := current
	current, initErr = nil, nil
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if s.cluster == nil { // a shared server: leave it as we found it
		for _, tp := range s.templates {
			for _, sql := range []string{
				"ALTER DATABASE " + ident(tp.name) + " WITH IS_TEMPLATE false",
				"DROP DATABASE IF EXISTS " + ident(tp.name) + " WITH (FORCE)",
			} {
				if _, err := s.admin.Exec(ctx, sql); err != nil && tp.err == nil {
					errs = append(errs, fmt.Errorf("drop template %s: %w", tp.name, err))
					break
				}
			}
		}
	}
	s.admin.Close()
	if s.cluster != nil {
		if err := s.cluster.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// templateName makes a database name from a template Name: lower case
// letters, digits and underscores, unique to this process, at most 63 bytes.
func templateName(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	clean := b.String()
	if len(clean) > 30 {
		clean = clean[:30]
	}
	return fmt.Sprintf("pgtest_tmpl_%s_%s", clean, processID)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
