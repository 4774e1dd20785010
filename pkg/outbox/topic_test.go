package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// A topic the broker does not know (yet: a metadata glitch, a topic not
// created, an ACL not granted) is the broker's condition, not the
// messages' fault: every message to it is retried for as long as it lasts,
// past MaxAttempts, and none becomes a dead letter; once the topic exists
// the backlog is delivered, none lost, none twice.
func TestAMissingTopicIsRetriedNotDeadLettered(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	brokers := kafkatest.Brokers(t)
	topic := "missing-" + uuid.NewString()[:8]
	evs := newEvents(t, 20, 5)
	appendEvents(t, pool, topic, evs)

	_, stop := startRelays(t, pool, 1, outbox.Config{
		Brokers: brokers, MaxAttempts: 2, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
	})
	defer stop()
	waitPastMaxAttempts(t, pool)
	st, err := outbox.ReadStats(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != 0 || st.Pending != int64(len(evs)) {
		t.Fatalf("after retries to a missing topic: %+v, want all %d pending and no dead letter", st, len(evs))
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, 3, topic); err != nil {
		t.Fatal(err)
	}
	waitDrained(t, pool, 90*time.Second)
	if rep := checkDelivery(evs, readTopic(t, brokers, topic)); rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("once the topic exists: %v", rep)
	}
}

// A topic this producer may not write to (TOPIC_AUTHORIZATION_FAILED: an ACL
// not granted yet, or lost for a while) is the broker's condition too: the
// backlog is retried past MaxAttempts, none of it dead-lettered, and once the
// broker lets the producer write, it is delivered, none lost, none twice.
//
// The broker is the embedded kfake whatever TEST_KAFKA says: a fault answers
// every Produce to the topic TOPIC_AUTHORIZATION_FAILED, as Apache Kafka
// answers a principal that may describe the topic but not write to it
// (kafkaconf's TestACLsRefuseAnotherServicesTopic), until it is removed.
func TestAnUnauthorizedTopicIsRetriedNotDeadLettered(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	broker, brokers, topic := embeddedTopic(t, "unauthorized", 3)
	refusal := broker.Cluster().Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1,
	})
	evs := newEvents(t, 20, 5)
	appendEvents(t, pool, topic, evs)

	_, stop := startRelays(t, pool, 1, outbox.Config{
		Brokers: brokers, MaxAttempts: 2, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
	})
	defer stop()
	waitPastMaxAttempts(t, pool)
	if refusal.Hits() == 0 {
		t.Fatal("the broker refused no Produce: the relay never tried to write to the topic")
	}
	st, err := outbox.ReadStats(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != 0 || st.Pending != int64(len(evs)) {
		t.Fatalf("after %d refused writes: %+v, want all %d pending and no dead letter", refusal.Hits(), st, len(evs))
	}

	refusal.Remove()
	waitDrained(t, pool, 90*time.Second)
	if rep := checkDelivery(evs, readTopic(t, brokers, topic)); rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("once the producer may write: %v", rep)
	}
}

// waitPastMaxAttempts waits until every row was tried at least 4 times,
// twice the relays' MaxAttempts of 2 in these tests.
func waitPastMaxAttempts(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	waitFor(t, 90*time.Second, "attempts past MaxAttempts", func() (bool, string) {
		var least int
		if err := pool.QueryRow(t.Context(), `SELECT coalesce(min(attempts), 0) FROM outbox_event`).Scan(&least); err != nil {
			t.Fatal(err)
		}
		return least >= 4, fmt.Sprintf("the least-tried row has %d attempts", least)
	})
}
