package query_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/kafkabroker"
	"github.com/usagebilling/billing/pkg/kafkatest"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
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
	brokers := kafkaWithTopics(t)
	pool := pgtest.NewPool(t, Template)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ib := NewInbox(t)
	runner, err := inbox.NewRunner(pool, ib, inbox.RunnerConfig{
		Brokers: brokers, Group: "query", Topics: app.Topics, SweepInterval: 200 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	background(t, runner.Run)
	router := chi.NewRouter()
	router.Use(auth.Middleware(devKeys(t), log))
	httpapi.New(app.NewReader(pool), log).Routes(router)
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	return brokers, srv.URL
}

// The same through service.Run, as main runs it.
func TestServiceRun(t *testing.T) {
	brokers := kafkaWithTopics(t)
	dbURL := pgtest.NewDB(t, Template)
	addr := freeAddr(t)
	early := background(t, func(ctx context.Context) error {
		return service.Run(ctx, query.Spec, nil, service.NewEnvFrom(map[string]string{
			"AUTH_DEV_KEY": "true", "DATABASE_URL": dbURL, "KAFKA_BROKERS": strings.Join(brokers, ","), "HTTP_ADDR": addr,
			"LOG_LEVEL": "warn", "CONSUMER_SWEEP_INTERVAL": "200ms",
		}))
	})
	base := "http://" + addr
	eventually(t, "the service to be ready", time.Minute, func() bool {
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
		time.Sleep(100 * time.Millisecond)
	}
	// Everything was delivered twice; after a pause the sums are unchanged.
	time.Sleep(500 * time.Millisecond)
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

func kafkaWithTopics(t *testing.T) []string {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, 3, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	return brokers
}

func produce(t *testing.T, brokers []string, evs ...Event) {
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
	for _, e := range evs {
		raw, err := e.Envelope.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{
			Topic: e.Topic, Key: sarama.StringEncoder(e.Envelope.PartitionKey), Value: sarama.ByteEncoder(raw),
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// background runs each fn until the test ends, then stops it and checks it
// returned nil. The returned function reports an fn that returned early.
func background(t *testing.T, fns ...func(context.Context) error) (early func() error) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, len(fns))
	var first atomic.Pointer[error]
	for _, fn := range fns {
		go func() {
			err := fn(ctx)
			if ctx.Err() == nil {
				if err == nil {
					err = errors.New("returned before it was stopped")
				}
				first.CompareAndSwap(nil, &err)
			}
			done <- err
		}()
	}
	t.Cleanup(func() {
		stop()
		for range fns {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("background: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("background work did not stop")
				return
			}
		}
	})
	return func() error {
		if err := first.Load(); err != nil {
			return *err
		}
		return nil
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
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
