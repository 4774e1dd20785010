package usage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// client calls the service as tenant acme, with the development key the
// services under test accept (AUTH_DEV_KEY=true).
var client = auth.Client(auth.DevToken(auth.RoleTenant, "acme"))

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestServiceEndToEnd runs the whole service as main does (service.Run:
// migrations, HTTP, inbox consumer, outbox relay) against an embedded
// broker of its own (the topic names are fixed): a PriceActivated on
// meter.events.v1 becomes price evidence, a usage fact sent over HTTP is
// priced with it and its UsageAccepted reaches usage.events.v1.
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
		runErr = service.Run(runCtx, usage.Spec, nil, service.NewEnvFrom(map[string]string{
			"AUTH_DEV_KEY": "true", "DATABASE_URL": pgtest.NewDB(t, usagetest.Template), "KAFKA_BROKERS": strings.Join(brokers, ","),
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
		s, _ := get(base + "/readyz")
		return s == 200
	})

	// The meter's event, published as the meter's relay would.
	price := usagetest.PriceEvent(t, usagetest.Price{Tenant: "acme", Meter: "api", Currency: "USD", Version: 1,
		UnitPrice: "0.01", EffectiveAt: time.Now().Add(-time.Hour)})
	kafkatest.Produce(t, brokers, events.TopicMeter, kafkatest.Keyed(t, price)...)

	body := fmt.Sprintf(`{"sourceSystem":"gw","sourceEventId":"1","meterCode":"api","quantity":"3","occurredAt":%q}`,
		time.Now().UTC().Format(time.RFC3339))
	var status int
	var resp string
	// The evidence arrives asynchronously: unknown_meter until it does.
	servicetest.Eventually(t, "usage accepted", 30*time.Second, func() bool {
		status, resp = post(t, base+"/v1/tenants/acme/usage", body)
		return status != http.StatusUnprocessableEntity
	})
	if status != http.StatusCreated {
		t.Fatalf("accept: %d %s", status, resp)
	}
	var acc struct {
		EventID      string `json:"eventId"`
		PriceVersion int64  `json:"priceVersion"`
	}
	if err := json.Unmarshal([]byte(resp), &acc); err != nil || acc.PriceVersion != 0 || acc.EventID == "" {
		t.Fatalf("accepted %s: %v", resp, err)
	}

	// The relay publishes the UsageAccepted.
	reg := envelope.NewRegistry()
	events.Register(reg)
	d := consumeUntil(t, brokers, events.TopicUsage, func(raw []byte) (*envelope.Decoded, bool) {
		d, err := reg.Decode(raw)
		return d, err == nil && d.Envelope.EventID.String() == acc.EventID
	})
	if p := d.Payload.(events.UsageAccepted); p.PriceVersion != 0 || p.Currency != "USD" || p.Quantity.String() != "3" {
		t.Fatalf("published payload %+v", p)
	}
}

func get(url string) (int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// consumeUntil reads partition 0 of topic from the start until match
// accepts a message.
func consumeUntil[T any](t *testing.T, brokers []string, topic string, match func([]byte) (T, bool)) T {
	t.Helper()
	c, err := sarama.NewConsumer(brokers, kafkaconf.New("usage-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-pc.Messages():
			if v, ok := match(m.Value); ok {
				return v
			}
		case err := <-pc.Errors():
			t.Fatal(err)
		case <-timeout:
			t.Fatal(errors.New("timed out waiting for the published event"))
		}
	}
}
