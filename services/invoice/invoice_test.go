package invoice_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/document"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// client calls the service as tenant acme, with the development key the
// services under test accept (AUTH_DEV_KEY=true).
var client = auth.Client(auth.DevToken(auth.RoleTenant, "acme"))

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(m))) }

// The consumer path as the service runs it, against a real Kafka-protocol
// broker: an inbox.Runner with the invoice handlers, the outbox relay and the
// HTTP API. Billing events produced out of order and duplicated end as issued
// invoices whose InvoiceIssued reach invoice.events.v1.
func TestRunnerThroughKafka(t *testing.T) {
	brokers := kafkatest.BrokersWithTopics(t, 3, events.AllTopics...)
	pool := pgtest.NewPool(t, Template)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ib := NewInbox(t)
	runner, err := inbox.NewRunner(pool, ib, inbox.RunnerConfig{
		Brokers: brokers, Group: "invoice", Topics: app.Topics, SweepInterval: 200 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, outbox.Config{Brokers: brokers, Name: "invoice-relay", PollInterval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Background(t, runner.Run, relay.Run)
	router := chi.NewRouter()
	router.Use(auth.Middleware(devKeys(t), log))
	httpapi.New(app.New(app.Deps{Pool: pool}, app.Config{}), document.Seller{Name: document.DefaultSellerName}, log).Routes(router)
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)

	flow(t, brokers, srv.URL)
}

// The same through service.Run, as main runs it: migrations, runner, relay,
// HTTP with /healthz and /readyz.
func TestServiceRun(t *testing.T) {
	brokers := kafkatest.BrokersWithTopics(t, 3, events.AllTopics...)
	dbURL := pgtest.NewDB(t, Template)
	addr := servicetest.FreeAddr(t)
	early := servicetest.Background(t, func(ctx context.Context) error {
		return service.Run(ctx, invoice.Spec, nil, service.NewEnvFrom(map[string]string{
			"AUTH_DEV_KEY": "true", "DATABASE_URL": dbURL, "KAFKA_BROKERS": strings.Join(brokers, ","), "HTTP_ADDR": addr,
			"LOG_LEVEL": "warn", "CONSUMER_SWEEP_INTERVAL": "200ms", "RELAY_POLL_INTERVAL": "100ms",
		}))
	})
	base := "http://" + addr
	servicetest.Eventually(t, "the service to be ready", time.Minute, func() bool {
		if err := early(); err != nil {
			t.Fatalf("service.Run: %v", err)
		}
		var v map[string]any
		return getJSON(base+"/readyz", &v) == http.StatusOK
	})
	flow(t, brokers, base)
	// The service's upkeep makes invoice_charge's months ahead (decision
	// 0025, facts by month), as inbox_event's.
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	next := monthpart.MonthOf("invoice_charge", monthpart.Start(time.Now()).AddDate(0, 1, 0)).Name
	servicetest.Eventually(t, "invoice_charge's next month", time.Minute, func() bool {
		var ok bool
		if err := pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, next).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	})
}

func flow(t *testing.T, brokers []string, base string) {
	t.Helper()
	p := NewPeriod(t, "acme", "2026-11")
	c1, c2, c3 := p.Charge("USD", "2", "0.1675"), p.ChargeOf("USD", Meter, 2, "1", "1"), p.Charge("KRW", "1", "10.5")
	closed := p.Close()
	// The close before its last charge (each charge is its own aggregate,
	// on any partition), and duplicates.
	kafkatest.Produce(t, brokers, events.TopicBilling, kafkatest.Envelopes(t, c1, c2, closed, c1, c3, closed, c2)...)

	var inv map[string]any
	servicetest.Eventually(t, "the invoices issued", time.Minute, func() bool {
		var body struct {
			Invoices []map[string]any `json:"invoices"`
		}
		if getJSON(base+"/v1/tenants/acme/invoices?period=2026-11", &body) != http.StatusOK || len(body.Invoices) != 2 {
			return false
		}
		for _, i := range body.Invoices {
			if i["status"] != "issued" {
				return false
			}
		}
		inv = body.Invoices[1] // KRW sorts first
		return true
	})
	if inv["currency"] != "USD" || inv["subtotal"] != "1.335" || inv["total"] != "1.34" || len(inv["lines"].([]any)) != 3 ||
		inv["number"] == nil {
		t.Fatalf("USD invoice %v, want a number, subtotal 1.335, total 1.34 and 3 lines", inv)
	}

	got := consume(t, brokers, events.TopicInvoice, 2)
	ids := map[string]bool{}
	for _, e := range got {
		if e.EventType != events.TypeInvoiceIssued || e.AggregateVersion != 1 || e.CausationID != closed.EventID.String() {
			t.Fatalf("published %+v, want InvoiceIssued caused by the close", e)
		}
		ids[e.AggregateID] = true
	}
	if !ids[inv["invoiceId"].(string)] || len(ids) != 2 {
		t.Fatalf("InvoiceIssued for %v, want both invoices", ids)
	}
}

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return cfg
}

// consume reads topic from the start until it has n envelopes.
func consume(t *testing.T, brokers []string, topic string, n int) []envelope.Envelope {
	t.Helper()
	c, err := sarama.NewConsumer(brokers, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *sarama.ConsumerMessage)
	for _, part := range parts {
		pc, err := c.ConsumePartition(topic, part, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				msgs <- m
			}
		}()
	}
	reg := envelope.NewRegistry()
	events.Register(reg)
	var out []envelope.Envelope
	timeout := time.After(time.Minute)
	for len(out) < n {
		select {
		case m := <-msgs:
			d, err := reg.Decode(m.Value)
			if err != nil {
				t.Fatalf("decode %s message: %v", topic, err)
			}
			out = append(out, d.Envelope)
		case <-timeout:
			t.Fatalf("%d of %d events on %s", len(out), n, topic)
		}
	}
	return out
}

func getJSON(url string, v any) int {
	resp, err := client.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return -1
	}
	return resp.StatusCode
}

// devKeys verifies the development tokens the client sends, as a service
// with AUTH_DEV_KEY=true does.
func devKeys(t *testing.T) auth.Keys {
	t.Helper()
	k, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
