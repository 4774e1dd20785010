package migrations_test

import (
	"os"
	"testing"

	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The service's own schema with the shared ones it is deployed with.
func TestUpDownUp(t *testing.T) { pgtest.CheckUpDownUp(t, billing.Spec.Sets()...) }
