package pgcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/usagebilling/billing/testkit/pgcluster"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("PGCLUSTER_TEST_HELPER_DIR"); dir != "" {
		os.Exit(helperProcess(dir))
	}
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Remove(context.Background()); err != nil {
			t.Errorf("remove cluster: %v", err)
		}
	})
	return c
}

func exec1(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, url, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(t.Context())
	var n int
	if err := conn.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestStartCreateStopStartKeepsData(t *testing.T) {
	ctx := t.Context()
	c := start(t, pgcluster.Options{Fast: true})
	dir := c.Dir()

	for range 2 { // idempotent
		if err := c.CreateDatabase(ctx, "billing-test"); err != nil {
			t.Fatalf("create database: %v", err)
		}
	}
	url := c.URL("billing-test")
	if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/billing-test?sslmode=disable", c.Port()); url != want {
		t.Fatalf("URL = %q, want %q", url, want)
	}
	exec1(t, url, "CREATE TABLE facts (id int PRIMARY KEY)")
	exec1(t, url, "INSERT INTO facts VALUES (1), (2)")
	if got := count(t, c.URL("postgres"), "SELECT setting::int FROM pg_settings WHERE name = 'max_connections'"); got != pgcluster.DefaultMaxConnections {
		t.Errorf("max_connections = %d, want %d", got, pgcluster.DefaultMaxConnections)
	}
	if got := count(t, c.URL("postgres"), "SELECT count(*) FROM pg_settings WHERE name = 'fsync' AND setting = 'off'"); got != 1 {
		t.Errorf("fsync is on in a Fast cluster")
	}

	port := c.Port()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		conn.Close()
		t.Fatalf("port %d still accepts connections after Stop", port)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start again: %v", err)
	}
	if c.Port() != port {
		t.Fatalf("port changed from %d to %d", port, c.Port())
	}
	if got := count(t, url, "SELECT count(*) FROM facts"); got != 2 {
		t.Fatalf("rows after restart = %d, want 2", got)
	}

	if err := c.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp dir %s still exists after Remove (err %v)", dir, err)
	}
}

func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	c, err := pgcluster.Start(t.Context(), pgcluster.Options{Port: port, Fast: true})
	if err == nil {
		_ = c.Remove(t.Context())
		t.Fatalf("Start on a busy port succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, strconv.Itoa(port)) || !strings.Contains(msg, "already in use") {
		t.Fatalf("error does not name the busy port %d: %v", port, err)
	}
}

func TestExistingDirIsReused(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "pg")
	c := start(t, pgcluster.Options{Dir: dir, Fast: true})
	exec1(t, c.URL("postgres"), "CREATE TABLE kept (id int)")
	exec1(t, c.URL("postgres"), "INSERT INTO kept VALUES (7)")
	if err := c.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("Remove deleted a caller's Dir: %v", err)
	}

	c2 := start(t, pgcluster.Options{Dir: dir, Fast: true}) // a new port, the same data
	if got := count(t, c2.URL("postgres"), "SELECT count(*) FROM kept"); got != 1 {
		t.Fatalf("rows in reused dir = %d, want 1", got)
	}
}

func TestStartAfterCrash(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "pg")
	// Not Fast: with synchronous_commit off a crash may lose the rows.
	c := start(t, pgcluster.Options{Dir: dir})
	checkDurable(t, c)
	exec1(t, c.URL("postgres"), "CREATE TABLE kept (id int)")
	exec1(t, c.URL("postgres"), "INSERT INTO kept VALUES (7)")

	// The postmaster dies without cleaning up: postmaster.pid stays.
	pid := postmasterPID(t, dir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill postmaster: %v", err)
	}
	waitGone(t, pid)
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start after crash: %v", err)
	}
	// Anything left of the first server's guard (the pipe whose closing
	// stops the server) must not hit the new server when collected.
	runtime.GC()
	runtime.GC()
	// Deliberate: finalizers run on their own goroutine after a GC, and nothing tells when.
	time.Sleep(300 * time.Millisecond)
	if got := count(t, c.URL("postgres"), "SELECT count(*) FROM kept"); got != 1 {
		t.Fatalf("rows after crash = %d, want 1", got)
	}

	// A stale postmaster.pid whose PID now belongs to another process.
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// Run it as the server's user: a process of another user looks dead to
	// PostgreSQL (kill(pid, 0) fails with EPERM).
	fi, err := os.Stat(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	sleeper := exec.Command("sleep", "60")
	if os.Geteuid() == 0 {
		sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: st.Uid, Gid: st.Gid}}
	}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	stale := fmt.Sprintf("%d\n%s\n1700000000\n%d\n%s\n127.0.0.1\n  5432001    0\nready   \n",
		sleeper.Process.Pid, filepath.Join(dir, "data"), c.Port(), dir)
	if err := os.WriteFile(pidFile, []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(pidFile, int(st.Uid), int(st.Gid)); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start with a stale postmaster.pid: %v", err)
	}
	if got := count(t, c.URL("postgres"), "SELECT count(*) FROM kept"); got != 1 {
		t.Fatalf("rows after stale pid = %d, want 1", got)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the unrelated process was signalled: %v", err)
	}
}

// TestServerDiesWithProcess checks that a server does not outlive the
// process that started it when that process is killed.
func TestServerDiesWithProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pg")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGCLUSTER_TEST_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper did not report its port: %v", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q: %v", line, err)
	}
	pid := postmasterPID(t, dir)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pid)
	if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		conn.Close()
		t.Fatalf("port %d still open after the owning process died", port)
	}
}

// helperProcess starts a cluster in dir, prints its port and waits to be
// killed.
func helperProcess(dir string) int {
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{Dir: dir, Fast: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(c.Port())
	time.Sleep(time.Minute) // deliberate: the child waits to be killed; never outlive the test
	return 0
}

func postmasterPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatalf("read postmaster.pid: %v", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	return pid
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(50 * time.Millisecond) // polled: /proc tells no one when a process ends
	}
}

// checkDurable checks that a cluster that is not Fast keeps PostgreSQL's
// durability and runs with DurableSettings.
func checkDurable(t *testing.T, c *pgcluster.Cluster) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(t.Context())
	want := map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
	for _, line := range pgcluster.DurableSettings {
		name, value, ok := strings.Cut(line, " = ")
		if !ok {
			t.Fatalf("DurableSettings: %q is not name = 'value'", line)
		}
		want[name] = strings.Trim(value, "'")
	}
	for name, value := range want {
		var got string
		if err := conn.QueryRow(t.Context(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if got != value {
			t.Errorf("%s = %s in a durable cluster, want %s", name, got, value)
		}
	}
}
