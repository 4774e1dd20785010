package inbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// produce sends raws to partition 0 of topic, in order.
func produce(t *testing.T, brokers []string, topic string, raws ...[]byte) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer p.Close()
	for _, r := range raws {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.ByteEncoder(r)}); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// committed returns the group's committed offset of partition 0 of topic
// (-1 when none).
func committed(t *testing.T, brokers []string, group, topic string) int64 {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		t.Fatalf("new cluster admin: %v", err)
	}
	defer admin.Close()
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0}})
	if err != nil {
		t.Fatalf("list group offsets: %v", err)
	}
	b := resp.GetBlock(topic, 0)
	if b == nil {
		return -1
	}
	return b.Offset
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // polled: offsets, rows and metrics tell no one
	}
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

// startRunner runs a Runner on topic until the test ends (or stop is called).
func startRunner(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, brokers []string, group, topic string, reg prometheus.Registerer) *running {
	t.Helper()
	return startRunnerWith(t, pool, ib, inbox.RunnerConfig{
		Brokers: brokers, Group: group, Topics: []string{topic}, Registerer: reg,
	})
}

// startRunnerWith runs a Runner configured by cfg, with the tests' sweep
// interval, backoff and logger, until the test ends (or stop is called).
func startRunnerWith(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, cfg inbox.RunnerConfig) *running {
	t.Helper()
	cfg.SweepInterval = 200 * time.Millisecond
	cfg.MinBackoff, cfg.MaxBackoff = 50*time.Millisecond, 400*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := inbox.NewRunner(pool, ib, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() { rr.stop(t) })
	return rr
}

func (rr *running) stop(t *testing.T) {
	t.Helper()
	if rr.cancel == nil {
		return
	}
	rr.cancel()
	rr.cancel = nil
	select {
	case err := <-rr.done:
		if err != nil {
			t.Errorf("runner: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runner did not stop")
	}
}

func TestRunnerQuarantineDoesNotBlockHealthyEvents(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, tmpl)
	reg := prometheus.NewRegistry()
	ib := newInbox(t, inbox.Options{Service: "runner", Registerer: reg})

	first := ev(t, "Noted", 1, "h", 1, note{Origin: origin("ok")})
	garbage := []byte(`{"eventId": 42`)
	unknown := ev(t, "NoSuchEvent", 1, "k", 1, note{Origin: origin("q")})
	unsupported := ev(t, "Noted", 3, "s", 1, note{Origin: origin("q")})
	produce(t, brokers, topic,
		raw(t, first),
		garbage,
		raw(t, unknown),
		raw(t, ev(t, "Noted", 1, "h", 2, note{Origin: origin("ok")})),
		raw(t, unsupported),
		raw(t, withPayload(t, first, `{"origin":"o-conflict"}`)),
		raw(t, ev(t, "Noted", 1, "h", 3, note{Origin: origin("ok")})),
	)
	group := "inbox-" + topic
	rr := startRunner(t, pool, ib, brokers, group, topic, reg)
	eventually(t, "healthy events applied", 30*time.Second, func() bool {
		return len(effectVersions(t, pool, "h")) == 3
	})
	eventually(t, "quarantines", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM inbox_quarantine`) == 4
	})
	eventually(t, "quarantined gauge", 10*time.Second, func() bool {
		return metricValue(t, reg, "inbox_quarantined", map[string]string{"service": "runner"}) == 4
	})
	rr.stop(t)

	rows, err := pool.Query(t.Context(), `SELECT reason FROM inbox_quarantine ORDER BY "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, r)
	}
	want := []string{"malformed", "unknown_event_type", "unsupported_schema", "digest_conflict"}
	if len(reasons) != len(want) {
		t.Fatalf("reasons %q, want %q", reasons, want)
	}
	for i := range want {
		if reasons[i] != want[i] {
			t.Fatalf("reasons %q, want %q", reasons, want)
		}
	}
	if got := effectVersions(t, pool, "h"); got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("healthy effects %v", got)
	}
	if got := committed(t, brokers, group, topic); got != 7 {
		t.Fatalf("committed offset %d after a clean stop, want 7", got)
	}
	if got := metricValue(t, reg, "inbox_decisions_total", map[string]string{"outcome": "applied", "event_type": "Noted"}); got != 3 {
		t.Fatalf("applied decisions counted %v, want 3", got)
	}
	if got := metricValue(t, reg, "inbox_decisions_total", map[string]string{"outcome": "quarantined", "event_type": "unknown"}); got != 2 {
		t.Fatalf("quarantined decisions of unhandled types counted %v, want 2", got)
	}
}

// TestRunnerRetriesTransientDatabaseFailure stops the PostgreSQL server under
// a running consumer. Not parallel: it takes the server down for everyone.
func TestRunnerRetriesTransientDatabaseFailure(t *testing.T) {
	cluster := pgtest.Cluster(t)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, tmpl)
	reg := prometheus.NewRegistry()
	ib := newInbox(t, inbox.Options{Service: "runner", Registerer: reg})
	group := "inbox-" + topic
	startRunner(t, pool, ib, brokers, group, topic, reg)

	produce(t, brokers, topic, raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: "o-1"})))
	eventually(t, "first event applied", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM effect`) == 1
	})
	eventually(t, "first offset committed", 10*time.Second, func() bool {
		return committed(t, brokers, group, topic) == 1
	})

	ctx := t.Context()
	if err := cluster.Stop(ctx); err != nil {
		t.Fatalf("stop postgres: %v", err)
	}
	t.Cleanup(func() { _ = cluster.Start(context.Background()) })
	produce(t, brokers, topic, raw(t, ev(t, "Noted", 1, "a", 2, note{Origin: "o-2"})))
	transient := func() float64 {
		return metricValue(t, reg, "inbox_transient_errors_total", map[string]string{"service": "runner"})
	}
	eventually(t, "transient errors", 30*time.Second, func() bool { return transient() >= 3 })
	// Nothing may be committed: a deliberate wait longer than the
	// auto-commit interval, for a commit that must not come.
	time.Sleep(1500 * time.Millisecond)
	if got := committed(t, brokers, group, topic); got != 1 {
		t.Fatalf("offset %d committed while the database was down, want 1", got)
	}

	if err := cluster.Start(ctx); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	eventually(t, "second event applied after the restart", 30*time.Second, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM effect WHERE origin = 'o-2'`).Scan(&n)
		return err == nil && n == 1
	})
	eventually(t, "second offset committed", 10*time.Second, func() bool {
		return committed(t, brokers, group, topic) == 2
	})
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 2 {
		t.Fatalf("%d effects, want 2 (each applied exactly once)", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_quarantine`); got != 0 {
		t.Fatalf("%d messages quarantined by a transient failure", got)
	}
}

// TestRunnerBatchesAcrossPartitions has 20 events waiting on each of three
// partitions when the runner starts with batches of at most 50 and a linger
// long enough for every fetch to arrive: a batch takes messages from several
// partitions (more than one partition's 20), never more than 50, each
// partition's events are applied in their order, and after the batches
// committed each partition's offset is committed past its own last message.
// With two lanes, one of them holds two of the three partitions.
func TestRunnerBatchesAcrossPartitions(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 2} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			t.Parallel()
			testBatchesAcrossPartitions(t, lanes)
		})
	}
}

func testBatchesAcrossPartitions(t *testing.T, lanes int) {
	brokers := kafkatest.Brokers(t)
	const partitions, each = 3, 20
	topic := kafkatest.Topic(t, brokers, partitions)
	pool := pgtest.NewPool(t, tmpl)
	reg := prometheus.NewRegistry()
	ib := newInbox(t, inbox.Options{Service: "runner", Registerer: reg})
	for p := range int32(partitions) {
		aggregate := fmt.Sprintf("p%d", p)
		raws := make([][]byte, each)
		for i := range raws {
			raws[i] = raw(t, ev(t, "Noted", 1, aggregate, int64(i+1), note{Origin: origin(aggregate)}))
		}
		produceTo(t, brokers, topic, p, raws...)
	}
	group := "inbox-" + topic
	startRunnerWith(t, pool, ib, inbox.RunnerConfig{
		Brokers: brokers, Group: group, Topics: []string{topic}, Registerer: reg,
		BatchSize: 50, MaxWait: 2 * time.Second, Lanes: lanes,
	})
	eventually(t, "every event applied", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM effect`) == partitions*each
	})
	eventually(t, "every partition's offset committed", 30*time.Second, func() bool {
		for p := range int32(partitions) {
			if committedAt(t, brokers, group, topic, p) != each {
				return false
			}
		}
		return true
	})
	for p := range partitions {
		got := effectVersions(t, pool, fmt.Sprintf("p%d", p))
		if len(got) != each {
			t.Fatalf("partition %d: %d effects, want %d", p, len(got), each)
		}
		for i, v := range got {
			if v != int64(i+1) {
				t.Fatalf("partition %d: effects in versions %v, want 1..%d in order", p, got, each)
			}
		}
	}
	n, sum, atMost := histogram(t, reg, "inbox_batch_messages")
	if sum != partitions*each {
		t.Fatalf("batches held %v messages in all, want %d", sum, partitions*each)
	}
	if atMost[50] != n {
		t.Fatalf("%d of %d batches held more than BatchSize (50) messages", n-atMost[50], n)
	}
	if atMost[25] == n {
		t.Fatalf("all %d batches held at most 25 messages: none took from more than one partition", n)
	}
}

// produceTo sends raws to partition p of topic, in order.
func produceTo(t *testing.T, brokers []string, topic string, p int32, raws ...[]byte) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	pr, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer pr.Close()
	for _, r := range raws {
		if _, _, err := pr.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.ByteEncoder(r)}); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// committedAt returns the group's committed offset of partition p of topic
// (-1 when none).
func committedAt(t *testing.T, brokers []string, group, topic string, p int32) int64 {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		t.Fatalf("new cluster admin: %v", err)
	}
	defer admin.Close()
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {p}})
	if err != nil {
		t.Fatalf("list group offsets: %v", err)
	}
	b := resp.GetBlock(topic, p)
	if b == nil {
		return -1
	}
	return b.Offset
}

// histogram returns the observations of the histogram name in g, their
// sum, and the cumulative count of each bucket by upper bound (failing the
// test when there is no such histogram).
func histogram(t *testing.T, g prometheus.Gatherer, name string) (n uint64, sum float64, atMost map[float64]uint64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		atMost = map[float64]uint64{}
		for _, b := range h.GetBucket() {
			atMost[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		return h.GetSampleCount(), h.GetSampleSum(), atMost
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0, nil
}
