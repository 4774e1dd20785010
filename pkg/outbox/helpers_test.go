package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/pgtest"
)

var outboxDB = pgtest.Template{Name: "outbox", Migrate: outbox.Migrate}

const testEventType = "test.ThingHappened"

// embeddedTopic starts an embedded kfake broker for t alone (its faults and
// request hooks then touch no other test) with a fresh topic of partitions
// partitions, named prefix-<random>.
func embeddedTopic(t *testing.T, prefix string, partitions int) (*kafkabroker.Embedded, []string, string) {
	t.Helper()
	broker, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	topic := prefix + "-" + uuid.NewString()[:8]
	if err := kafkabroker.CreateTopics(t.Context(), broker.Addrs(), partitions, topic); err != nil {
		t.Fatal(err)
	}
	return broker, broker.Addrs(), topic
}

var eventBatch atomic.Int64

type thing struct {
	N int `json:"n"`
}

// newEvents makes n events spread over keys new aggregates (ids unique to
// the call), each aggregate's versions gap-free from 1 in the order returned.
func newEvents(t testing.TB, n, keys int) []envelope.Envelope {
	t.Helper()
	batch := eventBatch.Add(1)
	versions := make([]int64, keys)
	out := make([]envelope.Envelope, n)
	now := time.Now()
	for i := range n {
		k := i % keys
		versions[k]++
		ev, err := envelope.New(envelope.Meta{
			EventType:        testEventType,
			SchemaVersion:    1,
			TenantID:         "t1",
			AggregateType:    "thing",
			AggregateID:      fmt.Sprintf("b%d-k%04d", batch, k),
			AggregateVersion: versions[k],
			OccurredAt:       now,
			Producer:         "outbox-test",
		}, thing{N: i})
		if err != nil {
			t.Fatalf("new event: %v", err)
		}
		out[i] = ev
	}
	return out
}

// appendEvents commits events in transactions of up to 1,000.
func appendEvents(t testing.TB, pool *pgxpool.Pool, topic string, evs []envelope.Envelope) {
	t.Helper()
	ctx := t.Context()
	for start := 0; start < len(evs); start += 1000 {
		end := min(start+1000, len(evs))
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return outbox.Append(ctx, tx, topic, evs[start:end]...)
		})
		if err != nil {
			t.Fatalf("append events: %v", err)
		}
	}
}

// startRelays runs n relays until the test ends (or stop is called) and
// returns them with a function that stops them all and waits.
func startRelays(t testing.TB, pool *pgxpool.Pool, n int, cfg outbox.Config) ([]*outbox.Relay, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	relays := make([]*outbox.Relay, n)
	for i := range n {
		c := cfg
		c.Name = fmt.Sprintf("relay-%d", i)
		if c.Registerer == nil {
			c.Registerer = prometheus.NewRegistry()
		}
		r, err := outbox.NewRelay(pool, c)
		if err != nil {
			t.Fatalf("new relay: %v", err)
		}
		relays[i] = r
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				t.Errorf("relay %d: %v", i, err)
			}
		})
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return relays, stop
}

// waitDrained waits until no pending row is left, logging progress.
func waitDrained(t testing.TB, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "outbox drained", func() (bool, string) {
		var pending int64
		err := pool.QueryRow(t.Context(),
			`SELECT count(*) FROM outbox_pending`).Scan(&pending)
		if err != nil {
			return false, err.Error()
		}
		return pending == 0, fmt.Sprintf("%d pending", pending)
	})
}

// markSent deletes the pending entries of the rows of outbox_event that
// match where, as the relay does once the broker acknowledged them.
func markSent(t testing.TB, pool *pgxpool.Pool, where string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `DELETE FROM outbox_pending p USING outbox_event e
		WHERE e.shard = p.shard AND e.id = p.id AND `+where, args...); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, logging its status every few seconds.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up after %v: %s", what, timeout, status)
		}
		if time.Since(lastLog) > 5*time.Second {
			t.Logf("waiting for %s: %s", what, status)
			lastLog = time.Now()
		}
		// Polled: what the tests wait for is a row in the database or a
		// message on the broker, which tell no one.
		time.Sleep(20 * time.Millisecond)
	}
}

// delivered is one message read back from the topic.
type delivered struct {
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Envelope  envelope.Envelope
}

// readTopic reads every message of topic, partition by partition in offset
// order, up to the high-water marks at the time of the call.
func readTopic(t testing.TB, brokers []string, topic string) []delivered {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkaconf.New("outbox-test-reader"))
	if err != nil {
		t.Fatalf("new kafka client: %v", err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	defer consumer.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	var out []delivered
	for _, p := range partitions {
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatalf("newest offset of %s/%d: %v", topic, p, err)
		}
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("oldest offset of %s/%d: %v", topic, p, err)
		}
		if newest <= oldest {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, oldest)
		if err != nil {
			t.Fatalf("consume %s/%d: %v", topic, p, err)
		}
		timeout := time.After(60 * time.Second)
		for next := oldest; next < newest; {
			select {
			case m := <-pc.Messages():
				var ev envelope.Envelope
				if err := json.Unmarshal(m.Value, &ev); err != nil {
					t.Fatalf("message %s/%d@%d is no envelope: %v", topic, p, m.Offset, err)
				}
				out = append(out, delivered{Partition: p, Offset: m.Offset, Key: string(m.Key), Value: m.Value, Envelope: ev})
				next = m.Offset + 1
			case cerr := <-pc.Errors():
				t.Fatalf("consume %s/%d: %v", topic, p, cerr)
			case <-timeout:
				t.Fatalf("consume %s/%d: stuck at offset %d of %d", topic, p, next, newest)
			}
		}
		pc.Close()
	}
	return out
}

// deliveryReport compares what was appended with what the topic holds.
type deliveryReport struct {
	Lost, Duplicates, Reordered int
	Unknown                     int
	Examples                    []string
}

func (r deliveryReport) String() string {
	return fmt.Sprintf("lost=%d duplicates=%d reordered=%d unknown=%d examples=%v",
		r.Lost, r.Duplicates, r.Reordered, r.Unknown, r.Examples)
}

// checkDelivery finds lost events (appended, never in the topic), duplicate
// deliveries, and reordering: within a key, the first delivery of each
// aggregate version must come after the first delivery of the one before.
func checkDelivery(sent []envelope.Envelope, got []delivered) deliveryReport {
	var rep deliveryReport
	note := func(format string, args ...any) {
		if len(rep.Examples) < 5 {
			rep.Examples = append(rep.Examples, fmt.Sprintf(format, args...))
		}
	}
	want := make(map[uuid.UUID]envelope.Envelope, len(sent))
	for _, ev := range sent {
		want[ev.EventID] = ev
	}
	seen := make(map[uuid.UUID]bool, len(got))
	lastVersion := map[string]int64{}
	for _, d := range got {
		ev := d.Envelope
		if _, ok := want[ev.EventID]; !ok {
			rep.Unknown++
			note("unknown event %s", ev.EventID)
			continue
		}
		if d.Key != ev.PartitionKey {
			rep.Reordered++
			note("event %s under key %q, want %q", ev.EventID, d.Key, ev.PartitionKey)
		}
		if seen[ev.EventID] {
			rep.Duplicates++
			continue
		}
		seen[ev.EventID] = true
		if prev := lastVersion[ev.PartitionKey]; ev.AggregateVersion != prev+1 {
			rep.Reordered++
			note("key %s: version %d first delivered after version %d", ev.PartitionKey, ev.AggregateVersion, prev)
		}
		lastVersion[ev.PartitionKey] = max(lastVersion[ev.PartitionKey], ev.AggregateVersion)
	}
	for id := range want {
		if !seen[id] {
			rep.Lost++
			note("lost event %s", id)
		}
	}
	return rep
}
