package outbox_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/faultproxy"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestRelaySurvivesBrokerOutages runs a relay against a real Apache Kafka
// broker reached through toxiproxy, cuts the TCP path, then kills the broker
// process, and checks each time that the relay records its failed attempts,
// backs off, loses nothing and delivers everything once the broker is back.
func TestRelaySurvivesBrokerOutages(t *testing.T) {
	brokerPort := freePort(t)
	proxy, err := faultproxy.New("kafka", fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", brokerPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	broker := kafkatest.Apache(t, kafkabroker.ApacheOptions{Port: brokerPort, AdvertisedAddr: proxy.Addr()})
	brokers := broker.Addrs()
	topic := kafkatest.Topic(t, brokers, 6)

	pool := pgtest.NewPool(t, outboxDB)
	reg := prometheus.NewRegistry()
	_, stop := startRelays(t, pool, 1, outbox.Config{
		Brokers: brokers, Registerer: reg,
		BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second, MaxAttempts: 3,
	})
	var sent []envelope.Envelope
	send := func(n int) {
		evs := newEvents(t, n, 20)
		appendEvents(t, pool, topic, evs)
		sent = append(sent, evs...)
	}
	send(200)
	waitDrained(t, pool, 60*time.Second)

	outage := func(name string, down, up func()) {
		t.Logf("%s: broker unreachable", name)
		failedBefore := metricValue(t, reg, "outbox_failed_attempts_total")
		down()
		send(300)
		waitFor(t, 60*time.Second, "failed attempts recorded", func() (bool, string) {
			a := maxAttempts(t, pool)
			return a >= 2, fmt.Sprintf("max attempts on a pending row = %d", a)
		})
		// Backing off: a few attempts over several seconds, not a hot loop.
		// The time is the point: a deliberate wait, then the attempts counted.
		time.Sleep(4 * time.Second)
		attempts := maxAttempts(t, pool)
		if attempts > 15 {
			t.Errorf("%s: a pending row was attempted %d times in a few seconds: no backoff", name, attempts)
		}
		if metricValue(t, reg, "outbox_failed_attempts_total") <= failedBefore {
			t.Errorf("%s: outbox_failed_attempts_total did not grow", name)
		}
		st, err := outbox.ReadStats(t.Context(), pool)
		if err != nil {
			t.Fatal(err)
		}
		if st.DeadLetters != 0 {
			t.Fatalf("%s: %d rows dead-lettered by a broker outage (MaxAttempts 3 applies only to refused messages)", name, st.DeadLetters)
		}
		if st.Pending == 0 {
			t.Fatalf("%s: nothing pending while the broker was unreachable", name)
		}
		t.Logf("%s: %d pending, max attempts %d; restoring", name, st.Pending, attempts)
		up()
		waitDrained(t, pool, 2*time.Minute)
	}

	outage("path cut",
		func() { must(t, proxy.Cut()) },
		func() { must(t, proxy.Restore()) })
	outage("broker killed",
		func() { must(t, broker.Kill()) },
		func() {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			must(t, broker.Start(ctx))
		})
	send(100)
	waitDrained(t, pool, 60*time.Second)
	stop()

	rep := checkDelivery(sent, readTopic(t, brokers, topic))
	t.Logf("after two outages: %d events, %v", len(sent), rep)
	if rep.Lost != 0 || rep.Unknown != 0 {
		t.Fatalf("delivery after outages: %v", rep)
	}
	// Sends that timed out may have reached the broker before the cut: they
	// are legitimate at-least-once re-sends, and still in order per key.
	if rep.Reordered != 0 {
		t.Fatalf("delivery after outages: %v", rep)
	}
}

func maxAttempts(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(),
		`SELECT COALESCE(max(e.attempts), 0) FROM outbox_event e JOIN outbox_pending p ON p.shard = e.shard AND p.id = e.id`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
