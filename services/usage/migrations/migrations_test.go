package migrations_test

import (
	"os"
	"testing"

	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/services/usage"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The service's own schema with the shared ones it is deployed with.
func TestUpDownUp(t *testing.T) { pgtest.CheckUpDownUp(t, usage.Spec.Sets()...) }
