// Package system_test holds the system tests that run the five services in
// this process (servicetest.StartServices), each on its own throwaway
// database, on one embedded broker: every service's routes against its
// access table and its OpenAPI document, the operator's recovery through
// query, webhooks retried through query, reconciliation across time zones,
// and the operator console in a browser.
package system_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(m))) }

// specs are the five services, in the order they start.
var specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

// newStack runs the five services in this process
// (servicetest.StartServices), each on its own database, on a broker with
// every topic (3 partitions), sweeping deferred events every 200 ms and
// polling their outboxes every 100 ms.
func newStack(t testing.TB) *servicetest.Services {
	t.Helper()
	brokers := kafkatest.BrokersWithTopics(t, 3, events.AllTopics...)
	return servicetest.StartServices(t, brokers,
		map[string]string{"CONSUMER_SWEEP_INTERVAL": "200ms", "RELAY_POLL_INTERVAL": "100ms"}, specs...)
}

// call sends a JSON request (body marshalled when not nil, header set) and
// decodes a 2xx JSON answer into out; it returns the status and the
// problem code, if any.
func call(t testing.TB, c *http.Client, method, url string, header map[string]string, body, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, b, err)
		}
	}
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code
}
