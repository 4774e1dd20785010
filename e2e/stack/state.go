package stack

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerFile, in each run directory, names the launcher process that owns
// it: its pid and start time. It is no lock: a directory whose launcher is
// gone is removed by the next Start, and nothing ever waits on it.
const ownerFile = "launcher"

// DefaultStateDir is where run directories go unless Options.StateDir says
// otherwise: $TMPDIR/usagebilling-stack.
func DefaultStateDir() string { return filepath.Join(os.TempDir(), "usagebilling-stack") }

// newRunDir creates a directory for this run under stateDir and records
// this process as its owner.
func newRunDir(stateDir string) (string, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return "", fmt.Errorf("create state directory: %w", err)
	}
	dir, err := os.MkdirTemp(stateDir, "run-")
	if err != nil {
		return "", fmt.Errorf("create run directory: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("create run directory: %w", err)
	}
	pid := os.Getpid()
	owner := fmt.Sprintf("%d %d\n", pid, processStartTime(pid))
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", ownerFile, err)
	}
	return dir, nil
}

// sweepStale removes the run directories under stateDir whose launcher is
// gone (killed, crashed). A PostgreSQL server still running on one (its
// guard should have stopped it) gets an immediate shutdown first. Problems
// are logged, never fatal: a stale directory takes disk space, not ports.
func sweepStale(stateDir string, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(stateDir, "run-*"))
	for _, dir := range dirs {
		if ownerAlive(dir) {
			continue
		}
		dataDir := filepath.Join(dir, "postgres", "data")
		if pid := postmasterPID(dataDir); pid > 0 {
			log.Warn("stopping a PostgreSQL server left by a launcher that died", "pid", pid, "dir", dataDir)
			if !stopPostmaster(pid) {
				log.Warn("PostgreSQL server of a dead launcher did not stop; leaving its directory", "pid", pid, "dir", dir)
				continue
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("remove the directory of an earlier run", "dir", dir, "err", err)
			continue
		}
		log.Info("removed the directory of an earlier run whose launcher is gone", "dir", dir)
	}
}

// ownerAlive reports whether the launcher named in dir's owner file still
// runs (same pid and start time, so a reused pid does not count). A
// directory without a readable owner file is being created or is not ours
// to judge: it counts as alive unless it is over an hour old.
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		fi, serr := os.Stat(dir)
		return serr == nil && time.Since(fi.ModTime()) < time.Hour
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	return processStartTime(pid) == start && start != 0
}

// processStartTime returns a process's start time in clock ticks since boot
// (field 22 of /proc/<pid>/stat), or 0 when there is no such process.
func processStartTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 { // f[0] is field 3
		return 0
	}
	t, _ := strconv.ParseUint(f[19], 10, 64)
	return t
}

// postmasterPID returns the pid of the PostgreSQL server running on
// dataDir, or 0.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(dataDir)) {
		return 0 // gone, or the pid now belongs to another process
	}
	return pid
}

// stopPostmaster asks for an immediate shutdown (SIGQUIT, what pg_ctl stop
// -m immediate sends) and waits up to 15 seconds.
func stopPostmaster(pid int) bool {
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return errors.Is(err, syscall.ESRCH)
	}
	for range 150 {
		if !Alive(pid) {
			return true
		}
		time.Sleep(100 * time.Millisecond) // polled: only /proc tells when it ends
	}
	return false
}

// Alive reports whether process pid exists and is not a zombie (one that
// exited but was not reaped yet counts as gone).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}
