package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/pkg/kafkatest"
	"github.com/usagebilling/billing/pkg/pgtest"
)

// EnvTarget chooses what the e2e tests run against:
//
//   - local (default, what CI runs): the stack launcher, the five services
//     as OS processes built from the workspace, a throwaway PostgreSQL
//     cluster and the embedded broker (KAFKA=apache for a real Apache
//     Kafka broker; the other variables of stack.FromEnv apply too);
//   - containers: Docker containers through testcontainers-go, the
//     services built from deploy/'s Dockerfiles; it needs a Docker engine
//     and fails, never skips, without one;
//   - inprocess: the five services inside the test process (service.Run),
//     the quickest to debug.
const EnvTarget = "E2E_TARGET"

func TestMain(m *testing.M) {
	code := pgtest.Main(kafkatest.Wrap(m))
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// target is a running system the tests drive over HTTP.
type target struct {
	urls map[string]string // service name -> base URL
	dbs  map[string]string // service name -> database URL, direct (for the recovery status)
}

func startTarget(t *testing.T) *target {
	t.Helper()
	switch kind := os.Getenv(EnvTarget); kind {
	case "", "local":
		return startLocal(t)
	case "containers":
		return startContainers(t)
	case "inprocess":
		return startInProcess(t)
	default:
		t.Fatalf("%s=%q: want local (default), containers or inprocess", EnvTarget, kind)
		return nil
	}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the services once per test process.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := stack.WorkspaceRoot()
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "e2e-bin-"); buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		buildErr = stack.Build(ctx, root, binDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// startLocal starts the stack launcher's processes; on failure it logs the
// end of every service's log.
func startLocal(t *testing.T) *target {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = stack.ConsoleLogger(os.Stderr)
	}
	opts := stack.Options{
		BinDir: binaries(t),
		Logger: logger,
		Env:    map[string]string{"CONSUMER_SWEEP_INTERVAL": "500ms"},
	}
	if v := os.Getenv(kafkatest.EnvKafka); v != "" && os.Getenv(stack.EnvKafka) == "" {
		opts.Kafka = v // TEST_KAFKA=apache, as for the other packages' tests
	}
	opts, err := stack.FromEnv(opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range s.Services() {
				for i := range s.Instances(name) {
					t.Logf("last lines of %s:\n%s", s.LogFile(name, i), tail(s.LogFile(name, i), 30))
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop the stack: %v", err)
		}
	})
	return &target{urls: s.URLs(), dbs: s.DatabaseURLs()}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
