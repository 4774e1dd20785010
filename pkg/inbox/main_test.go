package inbox_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/usagebilling/billing/pkg/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(m),
		// sarama's metrics library starts one process-wide meter ticker
		// that never stops.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}
