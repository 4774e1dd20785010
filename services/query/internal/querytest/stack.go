package querytest

import (
	"testing"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// Specs are the five services, in the order they start.
var Specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

// NewStack runs the five services in this process
// (servicetest.StartServices), each on its own database, on a broker with
// every topic (3 partitions), sweeping deferred events every 200 ms and
// polling their outboxes every 100 ms.
func NewStack(t testing.TB) *servicetest.Services {
	t.Helper()
	brokers := kafkatest.BrokersWithTopics(t, 3, events.AllTopics...)
	return servicetest.StartServices(t, brokers,
		map[string]string{"CONSUMER_SWEEP_INTERVAL": "200ms", "RELAY_POLL_INTERVAL": "100ms"}, Specs...)
}
