package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkabroker"
	"github.com/usagebilling/billing/pkg/kafkatest"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/pkg/service/servicetest"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
)

// The five services in this process, each on its own database, on one
// Kafka-protocol broker, as services/query/recovery_test.go runs them.

var specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

// newStack runs the five services in this process (servicetest.StartServices),
// each on its own database, on a broker with the topics.
func newStack(t *testing.T) *servicetest.Services {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, 3, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	return servicetest.StartServices(t, brokers,
		map[string]string{"CONSUMER_SWEEP_INTERVAL": "200ms", "RELAY_POLL_INTERVAL": "100ms"}, specs...)
}

// call sends a JSON request and decodes a 2xx JSON answer into out; it
// returns the status and the problem code, if any.
func call(t *testing.T, c *http.Client, method, url string, header map[string]string, body, out any) (int, string) {
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

func produceRaw(t *testing.T, brokers []string, topic, key string, raw []byte) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(raw)}); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
