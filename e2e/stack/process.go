package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/usagebilling/billing/pkg/service"
)

// instance is one process of a service.
type instance struct {
	service   string
	index     int
	bin       string
	logPath   string
	env       map[string]string
	fixedPort bool
	log       *slog.Logger

	mu       sync.Mutex
	port     int
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited
	expected bool          // the exit was asked for (Kill, stop)
	ready    bool          // it answered /readyz since its last start
	logStart int64         // log size when the current process started
}

func (in *instance) name() string { return fmt.Sprintf("%s.%d", in.service, in.index) }

func (in *instance) addr() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return fmt.Sprintf("127.0.0.1:%d", in.port)
}

func (in *instance) pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.runningLocked() {
		return 0
	}
	return in.cmd.Process.Pid
}

func (in *instance) runningLocked() bool {
	if in.cmd == nil {
		return false
	}
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

var errPortTaken = errors.New("HTTP port taken")

// startReady starts the process and waits until it answers /readyz. A port
// the launcher picked that another process took in the meantime is picked
// again; a configured one is an error.
func (in *instance) startReady(ctx context.Context, timeout time.Duration) error {
	for attempt := 1; ; attempt++ {
		err := in.start()
		if err == nil {
			err = in.waitReady(ctx, timeout)
		}
		in.mu.Lock()
		repick := !in.fixedPort
		in.mu.Unlock()
		if err != nil && errors.Is(err, errPortTaken) && repick && attempt < 3 {
			in.mu.Lock()
			in.port = 0
			in.mu.Unlock()
			continue
		}
		return err
	}
}

func (in *instance) start() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.runningLocked() {
		return fmt.Errorf("start %s: already running as pid %d", in.name(), in.cmd.Process.Pid)
	}
	if in.port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		in.port = p
	}
	out, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", in.name(), err)
	}
	defer out.Close() // the child has its own descriptor
	logStart, _ := out.Seek(0, io.SeekEnd)
	addr := fmt.Sprintf("127.0.0.1:%d", in.port)
	fmt.Fprintf(out, "=== stack: starting %s on %s at %s ===\n", in.name(), addr, time.Now().Format(time.RFC3339))

	cmd := exec.Command(in.bin)
	cmd.Env = childEnv(in.env, addr)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a Ctrl-C in the terminal reaches only the
	// launcher, which stops the services in order; and SIGKILL when the
	// launcher dies, however it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("start %s (%s): %w", in.name(), in.bin, err)
	}
	exited := make(chan struct{})
	in.cmd, in.exited, in.expected, in.ready, in.logStart = cmd, exited, false, false, logStart
	go in.wait(cmd, exited)
	return nil
}

// wait reaps the process and reports an exit nobody asked for.
func (in *instance) wait(cmd *exec.Cmd, exited chan struct{}) {
	err := cmd.Wait()
	// Anything the service started in its group goes with it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	close(exited)
	in.mu.Lock()
	unexpected := !in.expected && in.ready && in.cmd == cmd
	in.mu.Unlock()
	if unexpected {
		in.log.Warn("service exited", "service", in.name(), "status", errString(err), "log", in.logPath)
	}
}

func (in *instance) waitReady(ctx context.Context, timeout time.Duration) error {
	in.mu.Lock()
	exited, logStart, url := in.exited, in.logStart, fmt.Sprintf("http://127.0.0.1:%d/readyz", in.port)
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 3 * time.Second}
	last := "no answer yet"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			// Another process on the port (a port given twice, a stray
			// server) is not this one ready: the answer must name the
			// service. This one then fails to bind and exits.
			var ready struct{ Service string }
			_ = json.Unmarshal(body, &ready)
			switch {
			case resp.StatusCode == http.StatusOK && ready.Service == in.service:
				in.mu.Lock()
				// Its URL is known now: a restart keeps the port.
				in.ready, in.fixedPort = true, true
				in.mu.Unlock()
				return nil
			case ready.Service != "" && ready.Service != in.service:
				last = fmt.Sprintf("%s answers on the port, not %s", ready.Service, in.service)
			default:
				last = fmt.Sprintf("%s %s", resp.Status, strings.TrimSpace(string(body)))
			}
		} else if ctx.Err() == nil || last == "no answer yet" {
			// A request cut by the deadline keeps the last answer: it says
			// why the instance was not ready (another service on its port).
			last = err.Error()
		}
		select {
		case <-exited:
			tail := lastLines(readFrom(in.logPath, logStart), 20)
			err := fmt.Errorf("%s exited during start (%s); last lines of %s:\n%s",
				in.name(), in.exitStatus(), in.logPath, tail)
			if strings.Contains(tail, "address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("%s not ready on %s after %v: %s; last lines of %s:\n%s",
				in.name(), url, timeout, last, in.logPath, lastLines(readFrom(in.logPath, logStart), 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (in *instance) exitStatus() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.cmd.ProcessState == nil {
		return "running"
	}
	return in.cmd.ProcessState.String()
}

// kill sends SIGKILL to the process group and waits for the exit.
func (in *instance) kill() error {
	in.mu.Lock()
	if !in.runningLocked() {
		in.mu.Unlock()
		return nil
	}
	in.expected = true
	pid, exited := in.cmd.Process.Pid, in.exited
	in.mu.Unlock()
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", in.name(), pid, err)
	}
	<-exited
	return nil
}

// stop asks the process to shut down (SIGTERM: the service stops taking
// requests, drains its consumer and relay) and kills it when it has not
// exited after grace or when ctx ends.
func (in *instance) stop(ctx context.Context, grace time.Duration) error {
	in.mu.Lock()
	if !in.runningLocked() {
		in.mu.Unlock()
		return nil
	}
	in.expected = true
	pid, exited := in.cmd.Process.Pid, in.exited
	in.mu.Unlock()
	_ = syscall.Kill(pid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
	return fmt.Errorf("%s did not stop within %v of SIGTERM; killed it", in.name(), grace)
}

// childEnv is the launcher's environment without any variable the services
// read, plus env and HTTP_ADDR.
func childEnv(env map[string]string, httpAddr string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(service.EnvNames, k) {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return append(out, "HTTP_ADDR="+httpAddr)
}

// spawn starts cmd from one OS thread that lives as long as the process.
// The kernel sends the parent-death signal when the thread that forked a
// child exits, not the process; Go may end an idle thread, so children
// forked from an arbitrary goroutine could be killed while the launcher
// still runs. A locked thread that never returns cannot end.
func spawn(cmd *exec.Cmd) error {
	spawnerOnce.Do(func() { go spawner() })
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd, done}
	return <-done
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnerOnce   sync.Once
	spawnRequests = make(chan spawnRequest)
)

func spawner() {
	runtime.LockOSThread() // never unlocked: the thread lives until the process ends
	for r := range spawnRequests {
		r.done <- r.cmd.Start()
	}
}

func errString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 4<<20))
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
