// Package pgcluster runs a throwaway PostgreSQL cluster from the local
// PostgreSQL binaries (initdb, pg_ctl): a data directory, a log file and a
// unix socket in one directory, listening on 127.0.0.1 only, with trust
// authentication for the superuser "postgres". Tests use it through pgtest;
// the stack launcher uses it directly.
//
// When the process runs as root, the PostgreSQL binaries (which refuse root)
// run as the "postgres" system user, and the directory is handed to that
// user.
//
// A cluster does not outlive the process that started it: a small guard
// process stops the server (pg_ctl stop -m immediate) when the starting
// process exits without calling Stop, for example when a test binary is
// killed by its timeout, or when the *Cluster is garbage collected: keep it
// reachable for as long as the server should run.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/usagebilling/billing/testkit/freeport"
)

// DefaultMaxConnections is the max_connections setting used when
// Options.MaxConnections is zero.
const DefaultMaxConnections = 300

// DurableSettings are what a durable cluster (not Fast) sets beyond
// PostgreSQL's defaults, for the services' write load: the defaults
// (shared_buffers 128MB, max_wal_size 1GB) start a checkpoint every dozen
// seconds at 2,500 facts/s, and after each one the first change to every
// page writes the whole page to the WAL again. Five minutes at 2,500
// facts/s for 100 tenants took 0.41-0.48 CPU-ms per fact of PostgreSQL
// with these, 0.51-0.53 without (docs/cpu-per-fact.md, "Step 14").
// Durability is unchanged. docs/operating.md gives them for a production
// server; deploy/compose.yaml runs its PostgreSQL with them.
var DurableSettings = []string{
	"shared_buffers = '512MB'",
	"max_wal_size = '8GB'",
	"checkpoint_timeout = '15min'",
}

// Options configures Start.
type Options struct {
	// Dir holds the data directory (Dir/data), the unix socket and the
	// server log (Dir/postgres.log). If it already holds a cluster, that
	// cluster is started again with its data. Empty means a new temporary
	// directory, deleted by Remove.
	Dir string
	// Port is the TCP port on 127.0.0.1. Zero picks a free port.
	Port int
	// Fast turns off durability (fsync, synchronous_commit,
	// full_page_writes) for speed. For tests only: a server crash loses
	// the last commits, a machine crash can corrupt the cluster.
	Fast bool
	// MaxConnections is max_connections; zero means DefaultMaxConnections.
	MaxConnections int
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
}

// Cluster is a PostgreSQL cluster started by Start. Its methods are safe for
// concurrent use.
type Cluster struct {
	dir     string
	dataDir string
	logFile string
	port    int
	opts    Options
	created bool // dir is a temporary directory made by Start
	removed bool
	bins    binaries
	cred    *syscall.Credential // run PostgreSQL binaries as this user; nil = as ourselves
	uid     int                 // owner for files we create; -1 = ourselves
	gid     int
	log     *slog.Logger

	mu      sync.Mutex
	guard   *exec.Cmd
	guardIn *os.File
}

type binaries struct {
	initdb string
	pgCtl  string
}

// Start creates (initdb) a cluster in opts.Dir unless one is already there,
// and starts it with pg_ctl, waiting until it accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, bins: bins, log: log, uid: -1, gid: -1}
	if err := c.setUser(); err != nil {
		return nil, err
	}

	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "pgcluster-")
		if err != nil {
			return nil, fmt.Errorf("create postgres dir: %w", err)
		}
		c.dir, c.created = dir, true
	} else {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("postgres dir %q: %w", opts.Dir, err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create postgres dir: %w", err)
		}
		c.dir = dir
	}
	c.dataDir = filepath.Join(c.dir, "data")
	c.logFile = filepath.Join(c.dir, "postgres.log")
	fail := func(err error) (*Cluster, error) {
		if c.created {
			_ = os.RemoveAll(c.dir)
		}
		return nil, err
	}
	if err := c.prepareDir(); err != nil {
		return fail(err)
	}

	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err != nil {
		if err := c.initdb(ctx); err != nil {
			return fail(err)
		}
	} else {
		log.Info("reusing postgres cluster", "dir", c.dataDir)
	}

	autoPort := opts.Port == 0
	for attempt := 1; ; attempt++ {
		c.port = opts.Port
		if autoPort {
			if c.port, err = freePort(); err != nil {
				return fail(err)
			}
		}
		err = c.start(ctx)
		// Another process may take an automatically picked port between
		// our check and the server's bind; pick another one.
		if err != nil && autoPort && errors.As(err, new(portInUseError)) && attempt < 3 {
			log.Warn("picked port was taken, retrying", "port", c.port)
			continue
		}
		if err != nil {
			return fail(err)
		}
		return c, nil
	}
}

// Port returns the TCP port the cluster listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// Dir returns the directory holding the data directory, socket and log.
func (c *Cluster) Dir() string { return c.dir }

// LogFile returns the path of the server log.
func (c *Cluster) LogFile() string { return c.logFile }

// URL returns the connection URL of database as the superuser postgres.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// CreateDatabase creates database name unless it exists already.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("create database %s: connect: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created concurrently
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down (pg_ctl stop -m fast) and waits for it. The
// data is kept; Start runs it again. Stopping a stopped cluster is a no-op.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopGuard()
	if c.removed {
		return nil
	}
	if err := c.clearStalePID(); err != nil {
		return err
	}
	running, err := c.running(ctx)
	if err != nil {
		return err
	}
	if !running {
		return nil
	}
	c.log.Info("stopping postgres", "port", c.port)
	if out, err := c.pgCtl(ctx, "stop", "-D", c.dataDir, "-m", "fast", "-w", "-t", "60"); err != nil {
		return fmt.Errorf("stop postgres: %w: %s", err, strings.TrimSpace(out))
	}
	return nil
}

// Start starts the cluster again after Stop (or after the server crashed),
// on the same port. Starting a running cluster is a no-op.
func (c *Cluster) Start(ctx context.Context) error {
	return c.start(ctx)
}

// Remove stops the cluster if it runs and deletes its directory if Start
// created it as a temporary directory. A directory given in Options.Dir is
// kept.
func (c *Cluster) Remove(ctx context.Context) error {
	err := c.Stop(ctx)
	if c.created {
		c.mu.Lock()
		defer c.mu.Unlock()
		if rerr := os.RemoveAll(c.dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove postgres dir: %w", rerr))
		}
		c.removed = true
	}
	return err
}

// portInUseError reports that the cluster's port is taken.
type portInUseError struct{ port int }

func (e portInUseError) Error() string {
	return fmt.Sprintf("start postgres: port %d on 127.0.0.1 is already in use; stop whatever listens there or use another port (0 picks a free one)", e.port)
}

func (c *Cluster) start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return fmt.Errorf("start postgres: cluster in %s was removed", c.dir)
	}
	if err := c.clearStalePID(); err != nil {
		return err
	}
	running, err := c.running(ctx)
	if err != nil {
		return err
	}
	if running {
		if c.guard != nil {
			return nil
		}
		// A server of an earlier run on this directory outlived it:
		// adopt it, on whatever port it listens.
		if port := c.pidFilePort(); port > 0 && port != c.port {
			c.log.Warn("adopting a running postgres from an earlier run", "dir", c.dataDir, "port", port)
			c.port = port
		}
		return c.startGuard()
	}
	// The server died on its own: retire its guard, lest it stop the
	// new server when its pipe is closed.
	c.stopGuard()
	if err := checkPortFree(c.port); err != nil {
		return err
	}
	if err := c.writeConfig(); err != nil {
		return err
	}
	c.log.Info("starting postgres", "port", c.port, "dir", c.dir)
	began := time.Now()
	for attempt := 1; ; attempt++ {
		logStart := fileSize(c.logFile)
		out, err := c.pgCtl(ctx, "start", "-D", c.dataDir, "-l", c.logFile, "-w", "-t", "120")
		if err == nil {
			break
		}
		tail := readFrom(c.logFile, logStart)
		if strings.Contains(tail, "could not bind") || strings.Contains(tail, "Address already in use") {
			return portInUseError{c.port}
		}
		// Backends of a crashed postmaster may still hold its shared
		// memory for a moment; they exit on their own.
		if strings.Contains(tail, "pre-existing shared memory block") && attempt < 20 && ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond) // polled: they exit on their own
			continue
		}
		return fmt.Errorf("start postgres on port %d: %w: %s\nlast lines of %s:\n%s",
			c.port, err, strings.TrimSpace(out), c.logFile, lastLines(tail, 20))
	}
	c.log.Info("postgres ready", "port", c.port, "took", time.Since(began).Round(time.Millisecond))
	return c.startGuard()
}

// running reports whether a server runs on the data directory (pg_ctl
// status: exit 0 running, 3 not running, 4 no data directory).
func (c *Cluster) running(ctx context.Context) (bool, error) {
	out, err := c.pgCtl(ctx, "status", "-D", c.dataDir)
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exitErr) && exitErr.ExitCode() == 3:
		return false, nil
	default:
		return false, fmt.Errorf("postgres status: %w: %s", err, strings.TrimSpace(out))
	}
}

// clearStalePID removes a postmaster.pid left by a server that did not shut
// down cleanly when its PID now belongs to an unrelated process. PostgreSQL
// (and pg_ctl status) only check whether that PID is alive, so a reused PID
// would make the cluster look running and refuse to start. A dead PID needs
// nothing: PostgreSQL removes such a file itself.
func (c *Cluster) clearStalePID() error {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		c.log.Warn("removing unreadable postmaster.pid", "file", pidFile)
		return removeFile(pidFile)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil { // process is gone
		return nil
	}
	if !bytes.Contains(cmdline, []byte(c.dataDir)) {
		c.log.Warn("removing stale postmaster.pid whose pid now belongs to another process", "pid", pid, "file", pidFile)
		return removeFile(pidFile)
	}
	return nil
}

// pidFilePort returns the port recorded in postmaster.pid (its fourth
// line), or 0.
func (c *Cluster) pidFilePort() int {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0
	}
	port, _ := strconv.Atoi(strings.TrimSpace(lines[3]))
	return port
}

func (c *Cluster) initdb(ctx context.Context) error {
	c.log.Info("initializing postgres cluster", "dir", c.dataDir)
	args := []string{"-D", c.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-instructions"}
	if c.opts.Fast {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, c.bins.initdb, args...)
	c.prepare(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", c.dataDir, err, lastLines(string(out), 20))
	}
	return nil
}

// writeConfig writes the settings this package owns into
// data/pgcluster.conf, included from postgresql.conf.
func (c *Cluster) writeConfig() error {
	conf := []string{
		"# Written by pgcluster on every start; edits are lost.",
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", c.port),
		fmt.Sprintf("unix_socket_directories = '%s'", strings.ReplaceAll(c.dir, "'", "''")),
		fmt.Sprintf("max_connections = %d", c.opts.MaxConnections),
		"logging_collector = off",
	}
	if c.opts.Fast {
		conf = append(conf, "fsync = off", "synchronous_commit = off", "full_page_writes = off")
	} else {
		conf = append(conf, DurableSettings...)
	}
	if err := c.writeFile(filepath.Join(c.dataDir, "pgcluster.conf"), strings.Join(conf, "\n")+"\n"); err != nil {
		return err
	}
	main := filepath.Join(c.dataDir, "postgresql.conf")
	b, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("read postgresql.conf: %w", err)
	}
	const include = "include_if_exists = 'pgcluster.conf'"
	if bytes.Contains(b, []byte(include)) {
		return nil
	}
	f, err := os.OpenFile(main, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	_, err = f.WriteString("\n" + include + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	return nil
}

// startGuard starts a process that stops the server when this process exits
// without Stop: it blocks reading a pipe whose write end only this process
// holds; the kernel closes it when the process dies.
func (c *Cluster) startGuard() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start postgres guard: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", `read _ignored; exec "$0" stop -D "$1" -m immediate -w >/dev/null 2>&1`, c.bins.pgCtl, c.dataDir)
	cmd.Stdin = r
	c.prepare(cmd)
	// Own process group: a Ctrl-C to the test run must not kill the guard
	// before it has done its job.
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start postgres guard: %w", err)
	}
	c.guard, c.guardIn = cmd, w
	return nil
}

func (c *Cluster) stopGuard() {
	if c.guard == nil {
		return
	}
	_ = c.guard.Process.Kill()
	_ = c.guard.Wait()
	_ = c.guardIn.Close()
	c.guard, c.guardIn = nil, nil
}

func (c *Cluster) pgCtl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bins.pgCtl, args...)
	c.prepare(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// prepare makes cmd run as the postgres user when we are root.
func (c *Cluster) prepare(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
}

// setUser decides which user runs the PostgreSQL binaries.
func (c *Cluster) setUser() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root, but PostgreSQL refuses to run as root and there is no postgres user to run it as; create one (useradd -r postgres) or run as another user: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("postgres gid %q: %w", u.Gid, err)
	}
	c.uid, c.gid = uid, gid
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return nil
}

// prepareDir hands the directory to the postgres user and makes its parent
// directories traversable by it.
func (c *Cluster) prepareDir() error {
	if c.cred == nil {
		return nil
	}
	for p := filepath.Dir(c.dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("postgres dir parent %s: %w", p, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			c.log.Warn("making directory traversable for the postgres user", "dir", p)
			if err := os.Chmod(p, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("make %s traversable for the postgres user: %w", p, err)
			}
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	err := filepath.WalkDir(c.dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, c.uid, c.gid)
	})
	if err != nil {
		return fmt.Errorf("give %s to the postgres user: %w", c.dir, err)
	}
	return nil
}

func (c *Cluster) writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if c.uid >= 0 {
		if err := os.Chown(path, c.uid, c.gid); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
	}
	return nil
}

// findBinaries looks for initdb and pg_ctl on PATH, then in the newest
// /usr/lib/postgresql/<version>/bin.
func findBinaries() (binaries, error) {
	initdb, err1 := exec.LookPath("initdb")
	pgCtl, err2 := exec.LookPath("pg_ctl")
	if err1 == nil && err2 == nil {
		return binaries{initdb: initdb, pgCtl: pgCtl}, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		b := binaries{initdb: filepath.Join(d, "initdb"), pgCtl: filepath.Join(d, "pg_ctl")}
		if isFile(b.initdb) && isFile(b.pgCtl) {
			return b, nil
		}
	}
	return binaries{}, errors.New("find postgres binaries: initdb and pg_ctl are neither on PATH nor in /usr/lib/postgresql/*/bin; install PostgreSQL server binaries")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// freePort picks a port outside the ephemeral range: the server is
// restarted on it, and a client connection must not have taken it meanwhile.
func freePort() (int, error) { return freeport.Port() }

func checkPortFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return portInUseError{port}
	}
	return l.Close()
}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(p string, off int64) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
