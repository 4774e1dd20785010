package e2e

import (
	"os"
	"testing"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
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

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(stacktest.Wrap(m)))) }

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

// startLocal starts the stack launcher's processes; on failure it logs the
// end of every service's log.
func startLocal(t *testing.T) *target {
	t.Helper()
	s := stacktest.Start(t, stack.Options{
		BinDir: stacktest.Binaries(t),
		Env:    map[string]string{"CONSUMER_SWEEP_INTERVAL": "500ms"},
	})
	return &target{urls: s.URLs(), dbs: s.DatabaseURLs()}
}
