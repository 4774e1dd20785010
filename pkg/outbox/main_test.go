package outbox_test

import (
	"os"
	"testing"

	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runCrashChild()
	}
	os.Exit(pgtest.Main(kafkatest.Wrap(m)))
}
