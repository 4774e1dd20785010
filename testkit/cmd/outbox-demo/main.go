// Command outbox-demo shows the shared mechanisms at work on a throwaway
// PostgreSQL cluster and an embedded Kafka-protocol broker: business
// transactions append events to the outbox, two relays send them to Kafka,
// and a consumer decides each one through the inbox — while the demo injects
// duplicate deliveries, an out-of-order pair and two poison messages. It
// prints what was decided and exits non-zero if any event was lost or applied
// twice.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/pgcluster"
)

const (
	topic     = "demo.meter-readings.v1"
	eventType = "MeterRead"
	events    = 10000
	meters    = 200
	resent    = 50
)

type reading struct {
	Meter string `json:"meter"`
	Seq   int64  `json:"seq"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "outbox-demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func run(ctx context.Context) error {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	step("starting a throwaway PostgreSQL cluster")
	pool, stopDatabase, err := startDatabase(ctx, quiet)
	if err != nil {
		return err
	}
	defer stopDatabase()

	step("starting the embedded Kafka-protocol broker")
	broker, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{Logger: quiet})
	if err != nil {
		return err
	}
	defer broker.Close()
	if err := kafkabroker.CreateTopics(ctx, broker.Addrs(), 6, topic); err != nil {
		return err
	}

	step("committing %d meter readings over %d meters, each with its event, in business transactions", events, meters)
	start := time.Now()
	if err := produce(ctx, pool); err != nil {
		return err
	}
	fmt.Printf("    %d transactions in %v\n", events/100, time.Since(start).Round(time.Millisecond))

	step("starting two outbox relays and one inbox consumer")
	reg := prometheus.NewRegistry()
	work, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWork(); wg.Wait() }()
	relayStart := time.Now()
	if err := startPipeline(work, &wg, pool, broker.Addrs(), reg, quiet); err != nil {
		return err
	}
	if err := waitFor(ctx, "relays draining the outbox", func() (bool, string, error) {
		st, err := outbox.ReadStats(ctx, pool)
		return err == nil && st.Pending == 0, fmt.Sprintf("%d pending", st.Pending), err
	}); err != nil {
		return err
	}
	relayTook := time.Since(relayStart)

	step("injecting faults straight into the topic: %d re-sent events, a version pair in reverse order, two poison messages", resent)
	if err := inject(ctx, pool, broker.Addrs()); err != nil {
		return err
	}
	want := events + 2
	if err := waitFor(ctx, "the consumer applying every event", func() (bool, string, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM applied_reading`).Scan(&n)
		dup := decisions(reg, inbox.OutcomeDuplicate)
		q := decisions(reg, inbox.OutcomeQuarantined)
		return n == want && dup >= resent && q >= 2, fmt.Sprintf("%d/%d applied, %d duplicates, %d quarantined", n, want, dup, q), err
	}); err != nil {
		return err
	}
	return report(ctx, pool, reg, relayTook)
}

// startDatabase starts a throwaway PostgreSQL cluster and returns a pool on
// its demo database, migrated, with the demo's tables; stop closes the pool
// and removes the cluster.
func startDatabase(ctx context.Context, log *slog.Logger) (pool *pgxpool.Pool, stop func(), err error) {
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = cluster.Remove(context.Background())
		}
	}()
	if err := cluster.CreateDatabase(ctx, "demo"); err != nil {
		return nil, nil, err
	}
	dbURL := cluster.URL("demo")
	if err := pgmigrate.Up(dbURL, outbox.Migrations, inbox.Migrations); err != nil {
		return nil, nil, err
	}
	pool, err = pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	if _, err := pool.Exec(ctx, `
		CREATE TABLE reading (meter text, seq bigint, PRIMARY KEY (meter, seq));
		CREATE TABLE applied_reading (event_id uuid PRIMARY KEY, meter text NOT NULL, seq bigint NOT NULL)`); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); _ = cluster.Remove(context.Background()) }, nil
}

// startPipeline starts two outbox relays and one inbox consumer (applying
// the readings) under ctx, in wg.
func startPipeline(ctx context.Context, wg *sync.WaitGroup, pool *pgxpool.Pool, brokers []string, reg *prometheus.Registry, log *slog.Logger) error {
	for i := range 2 {
		relay, err := outbox.NewRelay(pool, outbox.Config{Brokers: brokers, Name: fmt.Sprintf("relay-%d", i), Logger: log, Registerer: reg})
		if err != nil {
			return err
		}
		wg.Go(func() { _ = relay.Run(ctx) })
	}
	registry := envelope.NewRegistry()
	envelope.Register[reading](registry, eventType, 1)
	ib, err := inbox.New(registry, map[string]inbox.Handler{eventType: inbox.On(apply)}, inbox.Options{Service: "demo", Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	runner, err := inbox.NewRunner(pool, ib, inbox.RunnerConfig{Brokers: brokers, Group: "demo", Topics: []string{topic}, Logger: log})
	if err != nil {
		return err
	}
	wg.Go(func() { _ = runner.Run(ctx) })
	return nil
}

// produce commits the readings, 100 per transaction, each reading row with
// its event.
func produce(ctx context.Context, pool *pgxpool.Pool) error {
	seq := map[string]int64{}
	for start := 0; start < events; start += 100 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var evs []envelope.Envelope
			for i := start; i < start+100; i++ {
				m := fmt.Sprintf("meter-%03d", i%meters)
				seq[m]++
				if _, err := tx.Exec(ctx, `INSERT INTO reading VALUES ($1, $2)`, m, seq[m]); err != nil {
					return err
				}
				ev, err := newEvent(m, seq[m], 1)
				if err != nil {
					return err
				}
				evs = append(evs, ev)
			}
			return outbox.Append(ctx, tx, topic, evs...)
		})
		if err != nil {
			return fmt.Errorf("commit readings: %w", err)
		}
	}
	return nil
}

func newEvent(meter string, seq int64, schema int) (envelope.Envelope, error) {
	return envelope.New(envelope.Meta{
		EventType: eventType, SchemaVersion: schema, TenantID: "demo", AggregateType: "meter",
		AggregateID: meter, AggregateVersion: seq, OccurredAt: time.Now(), Producer: "outbox-demo",
	}, reading{Meter: meter, Seq: seq})
}

func apply(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, r reading) (inbox.Outcome, error) {
	_, err := tx.Exec(ctx, `INSERT INTO applied_reading VALUES ($1, $2, $3)`, d.Envelope.EventID, r.Meter, r.Seq)
	return inbox.Outcome{}, err
}

// inject sends, around the relays: already published events again, version 2
// of a new meter before its version 1, an unsupported schema version and
// bytes that are no envelope.
func inject(ctx context.Context, pool *pgxpool.Pool, brokers []string) error {
	p, err := sarama.NewSyncProducer(brokers, kafkaconf.NewIdempotentProducer("outbox-demo-injector"))
	if err != nil {
		return err
	}
	defer p.Close()
	rows, err := pool.Query(ctx, `SELECT partition_key, envelope FROM outbox_event ORDER BY random() LIMIT $1`, resent)
	if err != nil {
		return err
	}
	var msgs []*sarama.ProducerMessage
	for rows.Next() {
		var key string
		var body []byte
		if err := rows.Scan(&key, &body); err != nil {
			return err
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(body)})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	v1, err := newEvent("meter-late", 1, 1)
	if err != nil {
		return err
	}
	v2, err := newEvent("meter-late", 2, 1)
	if err != nil {
		return err
	}
	future, err := newEvent("meter-future", 1, 9)
	if err != nil {
		return err
	}
	for _, ev := range []envelope.Envelope{v2, v1, future} {
		body, err := ev.Marshal()
		if err != nil {
			return err
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(ev.PartitionKey), Value: sarama.ByteEncoder(body)})
	}
	msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("\x00not an envelope")})
	return p.SendMessages(msgs)
}

func report(ctx context.Context, pool *pgxpool.Pool, reg *prometheus.Registry, relayTook time.Duration) error {
	var applied, distinct, missing int
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM applied_reading),
		       (SELECT count(DISTINCT (meter, seq)) FROM applied_reading),
		       (SELECT count(*) FROM reading r WHERE NOT EXISTS
		          (SELECT 1 FROM applied_reading a WHERE a.meter = r.meter AND a.seq = r.seq))`).
		Scan(&applied, &distinct, &missing)
	if err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT reason, count(*) FROM inbox_quarantine GROUP BY reason ORDER BY reason`)
	if err != nil {
		return err
	}
	quarantine, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var reason string
		var n int
		err := r.Scan(&reason, &n)
		return fmt.Sprintf("%s x%d", reason, n), err
	})
	if err != nil {
		return err
	}
	var late []int64
	rows, err = pool.Query(ctx, `SELECT seq FROM applied_reading WHERE meter = 'meter-late' ORDER BY seq`)
	if err == nil {
		late, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return err
	}
	st, err := outbox.ReadStats(ctx, pool)
	if err != nil {
		return err
	}

	fmt.Println()
	fmt.Println("Report")
	fmt.Printf("  relays: %d events published in %v (%.0f events/s, 2 relays, embedded broker, 2 cores shared)\n",
		events, relayTook.Round(time.Millisecond), float64(events)/relayTook.Seconds())
	fmt.Printf("  outbox: %d pending, %d dead letters\n", st.Pending, st.DeadLetters)
	fmt.Printf("  inbox decisions: applied %d, duplicate %d, deferred %d, quarantined %d\n",
		decisions(reg, inbox.OutcomeApplied), decisions(reg, inbox.OutcomeDuplicate),
		decisions(reg, inbox.OutcomeDeferred), decisions(reg, inbox.OutcomeQuarantined))
	fmt.Printf("  reverse-order pair applied as versions %v\n", late)
	fmt.Printf("  quarantined: %v\n", quarantine)
	fmt.Printf("  effects: %d rows for %d distinct readings; readings never applied: %d\n", applied, distinct, missing)

	var problems []string
	if missing != 0 {
		problems = append(problems, fmt.Sprintf("%d readings lost", missing))
	}
	if applied != distinct || applied != events+2 {
		problems = append(problems, fmt.Sprintf("%d effects for %d events", applied, events+2))
	}
	if d := decisions(reg, inbox.OutcomeDuplicate); d < resent {
		problems = append(problems, fmt.Sprintf("only %d of %d re-sent events seen as duplicates", d, resent))
	}
	if len(quarantine) != 2 {
		problems = append(problems, fmt.Sprintf("quarantine %v, want malformed and unsupported_schema", quarantine))
	}
	if len(late) != 2 {
		problems = append(problems, "the reverse-order pair was not applied")
	}
	if len(problems) > 0 {
		out, _ := json.Marshal(problems)
		return fmt.Errorf("checks failed: %s", out)
	}
	fmt.Println("  every committed event applied exactly once: ok")
	return nil
}

// decisions reads inbox_decisions_total for one outcome, summed over types.
func decisions(reg *prometheus.Registry, outcome string) int {
	mfs, _ := reg.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "inbox_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(total)
}

// waitFor polls cond every 100ms, printing progress each second, for up to
// two minutes.
func waitFor(ctx context.Context, what string, cond func() (bool, string, error)) error {
	deadline := time.Now().Add(2 * time.Minute)
	last := time.Now()
	for {
		ok, status, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			fmt.Printf("    %s: done (%s)\n", what, status)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: gave up after 2m: %s", what, status)
		}
		if time.Since(last) >= time.Second {
			fmt.Printf("    %s: %s\n", what, status)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
