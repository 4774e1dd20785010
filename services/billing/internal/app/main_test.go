package app_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(kafkatest.Wrap(m)), kafkatest.GoleakOptions()...)
}
