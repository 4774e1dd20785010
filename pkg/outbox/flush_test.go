package outbox_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// A relay's round goes to the broker in one produce request, not in one per
// partition batch acknowledged in turn (sarama's default, 6-12 requests for
// a round of 500): a full round as soon as its last message is handed over,
// not after the linger (an hour here, so only the full round's trigger can
// send it), and a smaller round after the linger. Every event is delivered
// once. The broker is the embedded kfake whatever TEST_KAFKA says: it counts
// the produce requests.
func TestARoundIsOneProduceRequest(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	broker, brokers, topic := embeddedTopic(t, "rounds", 6)
	var requests atomic.Int64
	broker.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		requests.Add(1)
		return nil, nil, false // counted, then handled by the broker
	})

	var sent []envelope.Envelope
	for _, round := range []struct {
		what   string
		events int
		linger time.Duration
	}{
		{"a full round, the linger an hour", 500, time.Hour},
		{"a round of 290, the linger 50ms", 290, 50 * time.Millisecond},
	} {
		// Appended before the relay starts, so its first round claims them all.
		evs := newEvents(t, round.events, 100)
		appendEvents(t, pool, topic, evs)
		sent = append(sent, evs...)
		before := requests.Load()
		_, stop := startRelays(t, pool, 1, outbox.Config{Brokers: brokers, BatchSize: 500, Linger: round.linger})
		waitDrained(t, pool, time.Minute)
		stop()
		if n := requests.Load() - before; n != 1 {
			t.Errorf("%s: %d events sent in %d produce requests, want 1", round.what, round.events, n)
		}
	}
	if rep := checkDelivery(sent, readTopic(t, brokers, topic)); rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("delivery: %v", rep)
	}
}
