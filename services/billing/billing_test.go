package billing_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// client calls the service as tenant acme, with the development key the
// services under test accept (AUTH_DEV_KEY=true).
var client = auth.Client(auth.DevToken(auth.RoleTenant, "acme"))

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(m))) }

var empty = pgtest.Template{Name: "empty", Migrate: func(context.Context, string) error { return nil }}

func TestMigrationsUpDownUp(t *testing.T) {
	t.Parallel()
	pgtest.CheckUpDownUp(t, billing.Spec.Sets()...)
}

// The whole process as `billing` runs it: migrations at start, the consumer
// on the real topics, the HTTP API, and the relay publishing to the broker.
func TestServiceRatesPublishesAndCloses(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, 3, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.NewDB(t, empty)
	addr := servicetest.FreeAddr(t)
	env := service.NewEnvFrom(map[string]string{
		"AUTH_DEV_KEY": "true", "DATABASE_URL": dbURL, "KAFKA_BROKERS": brokers[0], "HTTP_ADDR": addr, "LOG_LEVEL": "warn",
		"CONSUMER_GROUP": "billing-" + t.Name(), "RELAY_POLL_INTERVAL": "100ms",
	})
	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- service.Run(runCtx, billing.Spec, nil, env) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	base := "http://" + addr
	servicetest.Eventually(t, "readyz", time.Minute, func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("service stopped: %v", err)
		default:
		}
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	jan1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	usageEnv, usageRaw := bt.Usage{Tenant: "acme", Meter: "api_calls", Currency: "USD", PriceVersion: 1, Quantity: "1200",
		OccurredAt: jan1.Add(36 * time.Hour)}.Envelope(t)
	kafkatest.Produce(t, brokers, events.TopicUsage, kafkatest.Values(usageRaw)...)
	kafkatest.Produce(t, brokers, events.TopicMeter, kafkatest.Values(bt.SumMeter("api_calls").Raw(t),
		bt.Price{Tenant: "acme", Meter: "api_calls", Currency: "USD", Version: 1, UnitPrice: "0.001", EffectiveAt: jan1}.Raw(t))...)

	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	servicetest.Eventually(t, "ChargeRated published", time.Minute, func() bool {
		return bt.Count(t, pool, `
			SELECT count(*) FROM outbox_event e WHERE e.event_type = 'ChargeRated' AND e.dead_at IS NULL
			  AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.shard = e.shard AND p.id = e.id)`) == 1
	})
	resp, err := client.Get(base + "/v1/tenants/acme/charges?period=2026-01")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Charges []struct {
			UsageEventID string `json:"usageEventId"`
			Amount       string `json:"amount"`
		} `json:"charges"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Charges) != 1 || list.Charges[0].Amount != "1.2" || list.Charges[0].UsageEventID != usageEnv.EventID.String() {
		t.Fatalf("charges: %v %+v", err, list)
	}

	// Usage's watermarks (decision 0014), as the usage service publishes
	// them every second: the close waits for them.
	kafkatest.Produce(t, brokers, events.TopicUsage, kafkatest.Values(usageWatermarks(t, 3, time.Now().Add(time.Hour))...)...)
	req, _ := http.NewRequest("POST", base+"/v1/tenants/acme/periods/2026-01/close", nil)
	req.Header.Set("Idempotency-Key", "close-2026-01")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("close: %d", resp.StatusCode)
	}
	servicetest.Eventually(t, "BillingPeriodClosed published", time.Minute, func() bool {
		return bt.Count(t, pool, `
			SELECT count(*) FROM outbox_event e WHERE e.event_type = 'BillingPeriodClosed' AND e.dead_at IS NULL
			  AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.shard = e.shard AND p.id = e.id)`) == 1
	})
}

// usageWatermarks are usage's watermarks of every partition through through.
func usageWatermarks(t *testing.T, partitions int32, through time.Time) [][]byte {
	t.Helper()
	var out [][]byte
	for p := range partitions {
		env, err := envelope.New(envelope.Meta{
			EventType: events.TypeUsageAcceptedThrough, SchemaVersion: 1, TenantID: events.UsageWatermarkTenant,
			AggregateType: events.AggregateUsageWatermark, AggregateID: events.UsageWatermarkID(p, through, 0),
			AggregateVersion: 1, OccurredAt: through, Producer: "usage",
		}, events.UsageAcceptedThrough{Partition: p, Partitions: partitions, Through: through})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := env.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, raw)
	}
	return out
}
