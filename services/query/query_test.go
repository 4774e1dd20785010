package query_test

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

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// client calls the service as tenant acme, with the development key the
// services under test accept (AUTH_DEV_KEY=true).
var client = auth.Client(auth.DevToken(auth.RoleTenant, "acme"))

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(m))) }

// The consumer path as the service runs it, against a real Kafka-protocol
// broker: an inbox.Runner over the four public topics with the projection
// handlers, and the HTTP API.
func TestRunnerThroughKafka(t *testing.T) {
	brokers, base := runnerThroughKafka(t)
	flow(t, brokers, base)
}

// runnerThroughKafka starts the consumer path on a new broker and database
// and returns the brokers and the HTTP API's base URL.
func runnerThroughKafka(t *testing.T) ([]string, string) {
	brokers := kafkatest.BrokersWithTopics(t, 3, events.AllTopics...)
	pool := pgtest.NewPool(t, Template)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ib := NewInbox(t)
	runner, err := inbox.NewRunner(pool, ib, inbox.RunnerConfig{
		Brokers: brokers, Group: "query", Topics: app.Topics, SweepInterval: 200 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Background(t, runner.Run)
	router := chi.NewRouter()
	router.Use(auth.Middleware(devKeys(t), log))
	httpapi.New(app.New(app.Deps{Pool: pool}, app.Config{}), log).Routes(router)
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	return brokers, srv.URL
}

// The same through service.Run, as main runs it.
func TestServiceRun(t *testing.T) {
	brokers := kafkatest.BrokersWithTopics(t, 3, events.AllTopics...)
	dbURL := pgtest.NewDB(t, Template)
	addr := servicetest.FreeAddr(t)
	early := servicetest.Background(t, func(ctx context.Context) error {
		return service.Run(ctx, query.Spec, nil, service.NewEnvFrom(map[string]string{
			"AUTH_DEV_KEY": "true", "DATABASE_URL": dbURL, "KAFKA_BROKERS": strings.Join(brokers, ","), "HTTP_ADDR": addr,
			"LOG_LEVEL": "warn", "CONSUMER_SWEEP_INTERVAL": "200ms",
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
}

// flow produces one tenant's events on their topics, keyed by partition
// key, each twice, and waits for the summary to show their sums.
func flow(t *testing.T, brokers []string, base string) {
	t.Helper()
	f := NewFeed(t, "acme")
	price := f.Price("api_calls", "USD", "0.01")
	u1, u2, u3 := f.Usage("api_calls", "USD", "100"), f.Usage("api_calls", "USD", "50.5"), f.Usage("cpu", "KRW", "3")
	c1, c2, c3 := f.Charge(u1, "2026-11", "0.01"), f.Charge(u2, "2026-11", "0.01"), f.Charge(u3, "2026-11", "7.5")
	adj := f.Adjustment("2026-11", "USD", "-0.5")
	closed := f.Close("2026-11")
	inv, id := f.Invoice("2026-11", "USD", "1.005", "1")
	late := f.Adjustment("2026-11", "USD", "0.25")
	corr := f.Correction(id, late, "2026-11", "USD", "0.25")
	all := []Event{price, u1, u2, u3, c1, c2, c3, adj, closed, inv, late, corr}
	produce(t, brokers, append(all, all...)...)

	var s struct {
		Usage struct {
			Count           int               `json:"count"`
			QuantityByMeter map[string]string `json:"quantityByMeter"`
		} `json:"usage"`
		Charged, Adjusted, Invoiced map[string]string
		LastEventAt                 *time.Time `json:"lastEventAt"`
	}
	// The topics are consumed independently: wait for the full sums (the
	// duplicates must never push them past).
	deadline := time.Now().Add(time.Minute)
	for {
		if getJSON(base+"/v1/tenants/acme/summary", &s) == http.StatusOK &&
			s.Usage.Count == 3 && s.Usage.QuantityByMeter["api_calls"] == "150.5" && s.Usage.QuantityByMeter["cpu"] == "3" &&
			s.Charged["USD"] == "1.505" && s.Charged["KRW"] == "22.5" && s.Adjusted["USD"] == "-0.25" && len(s.Adjusted) == 1 &&
			s.Invoiced["USD"] == "1.25" && len(s.Invoiced) == 1 && s.LastEventAt != nil && s.LastEventAt.Equal(corr.Envelope.OccurredAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("summary %+v, want the sums of the events", s)
		}
		time.Sleep(100 * time.Millisecond) // an HTTP read of what the runner projected so far
	}
	// Everything was delivered twice; once every copy is decided, the sums
	// are unchanged.
	kafkatest.WaitConsumed(t, brokers, "query", time.Minute, app.Topics...)
	var again struct {
		Usage struct {
			Count int `json:"count"`
		} `json:"usage"`
		Charged map[string]string
	}
	if getJSON(base+"/v1/tenants/acme/summary", &again) != http.StatusOK || again.Usage.Count != 3 || again.Charged["USD"] != "1.505" {
		t.Fatalf("summary after the duplicates: %+v", again)
	}
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

// produce sends evs, each to its topic, in order.
func produce(t *testing.T, brokers []string, evs ...Event) {
	t.Helper()
	for _, e := range evs {
		kafkatest.Produce(t, brokers, e.Topic, kafkatest.Envelopes(t, e.Envelope)...)
	}
}
