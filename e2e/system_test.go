package e2e

import (
	"testing"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

var specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

// startInProcess runs the five services in this process through
// service.Run, the same path their mains take, each on its own database,
// all on one Kafka-protocol broker (E2E_TARGET=inprocess;
// servicetest.StartServices).
func startInProcess(t *testing.T) *target {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	if err := kafkabroker.CreateTopics(t.Context(), brokers, 6, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	s := servicetest.StartServices(t, brokers, map[string]string{"LOG_LEVEL": "warn", "CONSUMER_SWEEP_INTERVAL": "500ms"}, specs...)
	return &target{urls: s.URLs(), dbs: s.DatabaseURLs()}
}
