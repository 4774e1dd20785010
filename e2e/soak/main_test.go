package soak_test

import (
	"os"
	"testing"

	"github.com/usagebilling/billing/e2e/stack/stacktest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestMain removes the services' binaries TestSoak built (stacktest) and
// the throwaway PostgreSQL the harness's own tests started (pgtest).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(stacktest.Wrap(m))) }
