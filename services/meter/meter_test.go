package meter_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// client calls the service as tenant acme, with the development key the
// services under test accept (AUTH_DEV_KEY=true).
var client = auth.Client(auth.DevToken(auth.RoleTenant, "acme"))

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var tmpl = servicetest.Template(meter.Spec)

// TestServiceEndToEnd runs the whole service as main does (service.Run:
// migrations, HTTP, outbox relay) against an embedded broker of its own
// (the topic name is fixed): an activated price reaches meter.events.v1 as
// PriceActivated, with the MeterDefined of the meter it implies.
func TestServiceEndToEnd(t *testing.T) {
	broker, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	brokers := broker.Addrs()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, 1, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	addr := servicetest.FreeAddr(t)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = service.Run(runCtx, meter.Spec, nil, service.NewEnvFrom(map[string]string{
			"AUTH_DEV_KEY": "true", "DATABASE_URL": pgtest.NewDB(t, tmpl), "KAFKA_BROKERS": strings.Join(brokers, ","),
			"HTTP_ADDR": addr, "LOG_LEVEL": "warn", "RELAY_POLL_INTERVAL": "100ms",
		}))
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
			if runErr != nil {
				t.Errorf("service.Run: %v", runErr)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("service did not stop")
		}
	})
	base := "http://" + addr
	servicetest.Eventually(t, "readyz", 30*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("service stopped: %v", runErr)
		default:
		}
		return status(base+"/readyz") == 200
	})

	req, _ := http.NewRequest("POST", base+"/v1/tenants/acme/prices",
		strings.NewReader(`{"meterCode":"api","currency":"USD","unitPrice":"0.01"}`))
	req.Header.Set("Idempotency-Key", "e2e-1")
	req.Header.Set("X-Correlation-Id", "corr-1")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("activate: %d %s", resp.StatusCode, body)
	}
	var price struct {
		EventID string `json:"eventId"`
	}
	if err := json.Unmarshal(body, &price); err != nil {
		t.Fatal(err)
	}

	reg := envelope.NewRegistry()
	events.Register(reg)
	c, err := sarama.NewConsumer(brokers, kafkaconf.New("meter-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(events.TopicMeter, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	// Both the price and the meter it implies reach the broker, each on its
	// own key (their order across keys is not the relay's to keep).
	timeout := time.After(30 * time.Second)
	var sawPrice, sawMeter bool
	for !sawPrice || !sawMeter {
		select {
		case m := <-pc.Messages():
			d, err := reg.Decode(m.Value)
			if err != nil {
				t.Fatalf("published message does not decode: %v", err)
			}
			if md, ok := d.Payload.(events.MeterDefined); ok && md.Code == "api" {
				if string(m.Key) != "_catalog|meter|api" || !md.Implied || d.Envelope.CorrelationID != "corr-1" {
					t.Fatalf("MeterDefined key %q, envelope %+v, payload %+v", m.Key, d.Envelope, md)
				}
				sawMeter = true
				continue
			}
			if d.Envelope.EventID.String() != price.EventID {
				continue
			}
			if string(m.Key) != "acme|price|api.USD" || d.Envelope.CorrelationID != "corr-1" {
				t.Fatalf("key %q, envelope %+v", m.Key, d.Envelope)
			}
			sawPrice = true
		case err := <-pc.Errors():
			t.Fatal(err)
		case <-timeout:
			t.Fatal(errors.New("timed out waiting for PriceActivated and MeterDefined on the broker"))
		}
	}
}

func status(url string) int {
	resp, err := client.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
