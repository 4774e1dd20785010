package outbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkRelayThroughput measures Postgres -> Kafka relay throughput with
// ordering per key, for one hot key, 10 keys and 1,000 keys: b.N committed
// events drained by two relay instances. Compare events/s across key counts;
// the goal is one hot key at no less than half the throughput of 1,000 keys.
//
//	go test -run '^$' -bench RelayThroughput -benchtime 20000x ./outbox/
func BenchmarkRelayThroughput(b *testing.B) {
	for _, keys := range []int{1, 10, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			pool := pgtest.NewPool(b, outboxDB)
			brokers := kafkatest.Brokers(b)
			topic := kafkatest.Topic(b, brokers, 12)
			evs := newEvents(b, b.N, keys)
			appendEvents(b, pool, topic, evs)
			if _, err := pool.Exec(b.Context(), "VACUUM ANALYZE outbox_event"); err != nil {
				b.Fatal(err)
			}

			b.ResetTimer()
			start := time.Now()
			_, stop := startRelays(b, pool, 2, outbox.Config{Brokers: brokers})
			waitDrained(b, pool, 10*time.Minute)
			took := time.Since(start)
			b.StopTimer()
			stop()
			b.ReportMetric(float64(b.N)/took.Seconds(), "events/s")
		})
	}
}
