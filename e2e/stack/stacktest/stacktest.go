// Package stacktest starts the stack launcher's system for a test, the one
// way every e2e test does: the options the environment gives
// (stack.FromEnv, and TEST_KAFKA=apache as for the other packages' tests),
// progress on stderr with -v, and, when the test ends, the end of every
// service instance's log if it failed, then Stop. Binaries builds the
// services once per test process for the packages that start several
// systems; their TestMain removes them with Wrap:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(stacktest.Wrap(m)))) }
package stacktest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/testkit/kafkatest"
)

// LogLines is how many last lines of each service instance's log a failed
// test prints.
const LogLines = 30

// Start starts the system opts describe, with the environment's settings
// applied (stack.FromEnv), and stops it when the test ends. opts.Env and
// opts.ServiceEnv are how a test adds to every service's environment or to
// one service's. A nil opts.Logger reports progress on stderr with -v and
// nothing otherwise. The test fails if the system does not start or does
// not stop cleanly.
func Start(t testing.TB, opts stack.Options) *stack.Stack {
	t.Helper()
	if v := os.Getenv(kafkatest.EnvKafka); v != "" && os.Getenv(stack.EnvKafka) == "" && opts.Kafka == "" {
		opts.Kafka = v // TEST_KAFKA=apache, as for the other packages' tests
	}
	if opts.Logger == nil && testing.Verbose() {
		opts.Logger = stack.ConsoleLogger(os.Stderr)
	}
	opts, err := stack.FromEnv(opts)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s, err := stack.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start the stack: %v", err)
	}
	t.Logf("stack started in %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range s.Services() {
				for i := range s.Instances(name) {
					t.Logf("last lines of %s:\n%s", s.LogFile(name, i), Tail(s.LogFile(name, i), LogLines))
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop the stack: %v", err)
		}
	})
	return s
}

// Tail returns the last n lines of the file at path, or why it cannot.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binaries builds the services of the workspace once per test process and
// returns the directory holding them, for stack.Options.BinDir.
func Binaries(t testing.TB) string {
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

// M is what Wrap runs; *testing.M satisfies it.
type M interface{ Run() int }

// Wrap returns an M that runs m and then removes what Binaries built.
func Wrap(m M) M { return wrapped{m} }

type wrapped struct{ m M }

func (w wrapped) Run() int {
	code := w.m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	return code
}
