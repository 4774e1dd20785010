package app_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/testkit/kafkatest"
)

// The real consumer path: a Kafka consumer group on a real Kafka-protocol
// broker feeding the inbox with billing's handlers, several partitions,
// usage that arrives before its price, and every message delivered twice.
func TestRunnerRatesUsageFromTheBroker(t *testing.T) {
	t.Parallel()
	// The contract's own topics: billing's inbox takes an event only from its
	// type's topic (service.AuthorizeProducer).
	meterTopic, usageTopic := events.TopicMeter, events.TopicUsage
	brokers := kafkatest.BrokersWithTopics(t, 4, meterTopic, usageTopic)
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)

	var usage [][]byte
	var want []envelope.Envelope
	for i := range 30 {
		tenant := []string{"t1", "t2", "t3"}[i%3]
		version := int64(1 + i%2)
		env, raw := usageAt(tenant, version, "2", []time.Time{jan10, feb3}[i%2]).Envelope(t)
		usage = append(usage, raw)
		want = append(want, env)
	}
	// Usage first (it waits for its prices), then the prices, then all of it
	// again.
	kafkatest.Produce(t, brokers, usageTopic, kafkatest.Keyed(t, usage...)...)
	var prices [][]byte
	for _, tenant := range []string{"t1", "t2", "t3"} {
		prices = append(prices, priceV1(tenant).Raw(t), priceV2(tenant).Raw(t))
	}
	kafkatest.Produce(t, brokers, meterTopic, kafkatest.Keyed(t, prices...)...)
	kafkatest.Produce(t, brokers, usageTopic, kafkatest.Keyed(t, usage...)...)
	kafkatest.Produce(t, brokers, meterTopic, kafkatest.Keyed(t, prices...)...)

	r, err := inbox.NewRunner(pool, ib, inbox.RunnerConfig{
		Brokers: brokers, Group: "billing-test", Topics: []string{meterTopic, usageTopic},
		SweepInterval: 200 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
	}()

	// Every message consumed and decided, the duplicates too: the runner
	// commits a message's offset only once its decision is committed.
	kafkatest.WaitConsumed(t, brokers, "billing-test", time.Minute, meterTopic, usageTopic)
	// The usage that came before its price waits deferred; the sweep applies
	// it on its own interval, which nothing signals: polled.
	deadline := time.Now().Add(60 * time.Second)
	for bt.Count(t, pool, `SELECT count(*) FROM charge`) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("rated %d of %d usage events", bt.Count(t, pool, `SELECT count(*) FROM charge`), len(want))
		}
		time.Sleep(100 * time.Millisecond) // the sweep's interval is 200 ms
	}
	for _, e := range want {
		if n := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE usage_event_id = $1`, e.EventID); n != 1 {
			t.Fatalf("usage %s has %d charges", e.EventID, n)
		}
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM outbox_event WHERE event_type = 'ChargeRated'`); n != len(want) {
		t.Fatalf("ChargeRated = %d, want %d", n, len(want))
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred`); n != 0 {
		t.Fatalf("%d events still deferred", n)
	}
	// Each tenant's usage in v2's window was rated at v2's price.
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE price_version = 2 AND unit_price <> 0.02`); n != 0 {
		t.Fatalf("%d charges at the wrong price", n)
	}
}
