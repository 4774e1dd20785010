package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
)

// envChild makes the test binary a launcher (see TestMain) instead of
// running tests: its value is the JSON of childOptions.
const envChild = "STACK_TEST_LAUNCHER"

type childOptions struct {
	StateDir     string
	BinDir       string
	Ports        map[string]int
	PostgresPort int
	KafkaPort    int
}

// childReady is what the launcher child prints, on one line after
// "READY ", once its stack is up.
type childReady struct {
	Dir       string
	URLs      map[string]string
	Processes []stack.Process
}

func TestMain(m *testing.M) {
	if v := os.Getenv(envChild); v != "" {
		os.Exit(runChild(v))
	}
	os.Exit(stacktest.Wrap(m).Run())
}

// runChild is the launcher process of TestSecondStartAfterKilledLauncher:
// it starts a stack, reports it, and waits to be killed.
func runChild(config string) int {
	var o childOptions
	if err := json.Unmarshal([]byte(config), &o); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	s, err := stack.Start(context.Background(), stack.Options{
		StateDir: o.StateDir, BinDir: o.BinDir, Ports: o.Ports, PostgresPort: o.PostgresPort, KafkaPort: o.KafkaPort,
		Logger: stack.ConsoleLogger(os.Stderr),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	b, _ := json.Marshal(childReady{Dir: s.Dir(), URLs: s.URLs(), Processes: s.Processes()})
	fmt.Printf("READY %s\n", b)
	// Killed by the test long before this; never outlive it.
	time.Sleep(5 * time.Minute)
	return 1
}

func logger() *slog.Logger {
	if testing.Verbose() {
		return stack.ConsoleLogger(os.Stderr)
	}
	return slog.New(slog.DiscardHandler)
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func readyStatus(url string) int {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// brokerHealth is what url's /healthz says of the broker.
func brokerHealth(url string) string {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url + "/healthz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var h struct {
		Checks map[string]string `json:"checks"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return h.Checks["broker"]
}

// eventually polls cond every 100 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond) // polled: the processes' HTTP answers and files
	}
}

// TestPortInUse: a configured port that something holds stops Start before
// anything runs, with an error naming the port, its holder and the way out.
func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	state := t.TempDir()
	_, err = stack.Start(t.Context(), stack.Options{
		StateDir: state, BinDir: t.TempDir(), Logger: logger(),
		Ports: map[string]int{"meter": port, "usage": port + 0}, // the same port twice
	})
	if err == nil || !strings.Contains(err.Error(), "configured for both meter HTTP and usage HTTP") {
		t.Fatalf("Start with a port given twice: %v, want the duplicate named", err)
	}

	_, err = stack.Start(t.Context(), stack.Options{
		StateDir: state, BinDir: t.TempDir(), Logger: logger(), Ports: map[string]int{"billing": port},
	})
	var inUse *stack.PortInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("Start on a taken port: %v, want a *stack.PortInUseError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"port " + strconv.Itoa(port) + " (billing HTTP)",
		fmt.Sprintf("by pid %d", os.Getpid()),
		stack.EnvPortBase + "=9081",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if runs, _ := filepath.Glob(filepath.Join(state, "run-*")); len(runs) != 0 {
		t.Errorf("a failed port check left run directories %v", runs)
	}
}

// TestProxiesKillRestartStop: cutting a service's database path makes its
// /readyz fail and Restore brings it back; cutting the Kafka path leaves it
// ready (the outbox rides the outage out) and /healthz says the broker is
// unreachable, then reachable again; Kill and
// Restart work on one instance; Stop leaves no process and no directory.
func TestProxiesKillRestartStop(t *testing.T) {
	s, err := stack.Start(t.Context(), stack.Options{
		StateDir: t.TempDir(), BinDir: stacktest.Binaries(t), Logger: logger(),
		Services:  []string{"meter", "usage"},
		Instances: map[string]int{"usage": 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop(context.Background())
		}
	})
	if n := s.Instances("usage"); n != 2 {
		t.Fatalf("usage has %d instances, want 2", n)
	}
	meter := s.URL("meter", 0)

	for _, name := range []string{stack.ProxyDB("meter"), stack.ProxyKafka} {
		p := s.Proxy(name)
		if p == nil {
			t.Fatalf("no proxy %s; have %v", name, s.ProxyNames())
		}
		if err := p.Cut(); err != nil {
			t.Fatal(err)
		}
		if name == stack.ProxyKafka {
			eventually(t, 20*time.Second, "meter /healthz reporting the broker unreachable", func() bool {
				return brokerHealth(meter) == "unreachable"
			})
			if got := readyStatus(meter); got != http.StatusOK {
				t.Errorf("meter /readyz = %d with the broker cut, want 200: readiness follows the database only", got)
			}
		} else {
			eventually(t, 20*time.Second, "meter /readyz failing with "+name+" cut", func() bool {
				return readyStatus(meter) == http.StatusServiceUnavailable
			})
		}
		if got := readyStatus(s.URL("usage", 0)); name == stack.ProxyDB("meter") && got != http.StatusOK {
			t.Errorf("usage /readyz = %d with meter's database path cut, want 200: each service has its own path", got)
		}
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "meter /readyz back after restoring "+name, func() bool {
			return readyStatus(meter) == http.StatusOK && brokerHealth(meter) == "ok"
		})
	}

	pid := s.PID("usage", 1)
	if err := s.Kill("usage", 1); err != nil {
		t.Fatal(err)
	}
	if stack.Alive(pid) || s.PID("usage", 1) != 0 {
		t.Fatalf("usage.1 (pid %d) alive after Kill", pid)
	}
	if got := readyStatus(s.URL("usage", 1)); got != 0 {
		t.Fatalf("usage.1 answers %d after Kill", got)
	}
	if err := s.Restart(t.Context(), "usage", 1); err != nil {
		t.Fatal(err)
	}
	if got := readyStatus(s.URL("usage", 1)); got != http.StatusOK || s.PID("usage", 1) == pid {
		t.Fatalf("usage.1 after Restart: /readyz %d, pid %d (was %d)", got, s.PID("usage", 1), pid)
	}
	log, _ := os.ReadFile(s.LogFile("usage", 1))
	if n := strings.Count(string(log), "=== stack: starting usage.1"); n != 2 {
		t.Errorf("usage.1's log shows %d starts, want 2 (appended across restarts)", n)
	}

	procs := s.Processes()
	if len(procs) != 4 { // meter, usage x2, postgres
		t.Fatalf("processes %v, want 4", procs)
	}
	dir := s.Dir()
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, p := range procs {
		if stack.Alive(p.PID) {
			t.Errorf("%s (pid %d) still alive after Stop", p.Name, p.PID)
		}
	}
	if leftovers := processesMentioning(dir); len(leftovers) > 0 {
		t.Errorf("processes still refer to %s after Stop: %v", dir, leftovers)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("run directory %s after Stop: %v, want it removed", dir, err)
	}
}

// TestDirectStackHasNoProxies: with DirectDB and DirectKafka (load runs)
// the services reach PostgreSQL and the embedded broker with nothing in
// between: no proxy runs, the bootstrap address is the broker's own port,
// and a service sees its database and the broker.
func TestDirectStackHasNoProxies(t *testing.T) {
	port := freePorts(t, 1)[0]
	s, err := stack.Start(t.Context(), stack.Options{
		StateDir: t.TempDir(), BinDir: stacktest.Binaries(t), Logger: logger(),
		Services: []string{"meter"}, DirectDB: true, DirectKafka: true, KafkaPort: port,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if names := s.ProxyNames(); len(names) != 0 {
		t.Errorf("proxies %v, want none", names)
	}
	if got, want := s.KafkaBrokers(), []string{"127.0.0.1:" + strconv.Itoa(port)}; !slices.Equal(got, want) {
		t.Errorf("Kafka bootstrap %v, want the broker's own port %v", got, want)
	}
	if got, want := s.ServiceDatabaseURL("meter"), s.DatabaseURL("meter"); got != want {
		t.Errorf("meter's database URL %q, want the direct one %q", got, want)
	}
	meter := s.URL("meter", 0)
	eventually(t, 20*time.Second, "meter ready, the broker reachable", func() bool {
		return readyStatus(meter) == http.StatusOK && brokerHealth(meter) == "ok"
	})
}

// TestSecondStartAfterKilledLauncher: a launcher killed with SIGKILL takes
// its services and PostgreSQL with it, and a second launcher on the same
// ports and state directory starts cleanly and removes the first one's
// directory.
func TestSecondStartAfterKilledLauncher(t *testing.T) {
	ports := freePorts(t, len(stack.Services)+2)
	opts := childOptions{
		StateDir: t.TempDir(), BinDir: stacktest.Binaries(t), Ports: map[string]int{},
		PostgresPort: ports[len(ports)-2], KafkaPort: ports[len(ports)-1],
	}
	for i, name := range stack.Services {
		opts.Ports[name] = ports[i]
	}
	config, _ := json.Marshal(opts)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChild+"="+string(config))
	child.Stderr = os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				lines <- rest
				return
			}
		}
		close(lines)
	}()
	var ready childReady
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("the launcher child exited before its stack was ready")
		}
		if err := json.Unmarshal([]byte(line), &ready); err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the launcher child's stack was not ready within 3 minutes")
	}
	if len(ready.Processes) != len(stack.Services)+1 {
		t.Fatalf("child processes %v, want the services and postgres", ready.Processes)
	}
	if got := readyStatus(ready.URLs["meter"]); got != http.StatusOK {
		t.Fatalf("child's meter /readyz = %d", got)
	}

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	for _, p := range ready.Processes {
		eventually(t, 30*time.Second, fmt.Sprintf("%s (pid %d) gone after its launcher was killed", p.Name, p.PID), func() bool {
			return !stack.Alive(p.PID)
		})
	}
	if _, err := os.Stat(ready.Dir); err != nil {
		t.Fatalf("the killed launcher's directory %s: %v (expected left behind)", ready.Dir, err)
	}

	s, err := stack.Start(t.Context(), stack.Options{
		StateDir: opts.StateDir, BinDir: opts.BinDir, Ports: opts.Ports,
		PostgresPort: opts.PostgresPort, KafkaPort: opts.KafkaPort, Logger: logger(),
	})
	if err != nil {
		t.Fatalf("second start after a killed launcher: %v", err)
	}
	defer s.Stop(t.Context())
	if _, err := os.Stat(ready.Dir); !os.IsNotExist(err) {
		t.Errorf("the killed launcher's directory %s is still there: %v", ready.Dir, err)
	}
	for _, name := range stack.Services {
		if got := readyStatus(s.URL(name, 0)); got != http.StatusOK || s.URL(name, 0) != ready.URLs[name] {
			t.Errorf("%s on %s: /readyz %d; want 200 on the first launcher's URL %s", name, s.URL(name, 0), got, ready.URLs[name])
		}
	}
}

// processesMentioning lists the processes whose command line holds s.
func processesMentioning(s string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if pid == os.Getpid() || !stack.Alive(pid) {
			continue
		}
		out = append(out, fmt.Sprintf("pid %d: %s", pid, strings.ReplaceAll(string(b), "\x00", " ")))
	}
	return out
}
