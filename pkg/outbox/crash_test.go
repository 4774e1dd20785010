package outbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The crash test re-runs this test binary as a relay process that SIGKILLs
// itself right after the broker acknowledged its first batch, before marking
// it: the production code path, interrupted where a real crash hurts most.
const (
	childEnv        = "OUTBOX_TEST_CRASH_CHILD"
	childDBEnv      = "OUTBOX_TEST_CRASH_DB"
	childBrokersEnv = "OUTBOX_TEST_CRASH_BROKERS"
)

// runCrashChild is the relay process of the crash test; it never returns.
func runCrashChild() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(childDBEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	outbox.SetAfterSend(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
	relay, err := outbox.NewRelay(pool, outbox.Config{
		Brokers:   strings.Split(os.Getenv(childBrokersEnv), ","),
		Name:      "crashing-relay",
		BatchSize: 100,
		LeaseTTL:  2 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	_ = relay.Run(ctx)
	fmt.Fprintln(os.Stderr, "crash child: relay returned without crashing")
	os.Exit(3)
}

var consumerDB = pgtest.Template{Name: "outbox-consumer", Migrate: func(ctx context.Context, url string) error {
	if err := inbox.Migrate(ctx, url); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE effect (event_id uuid PRIMARY KEY, n int NOT NULL)`)
	return err
}}

func TestRelayKilledBetweenAckAndMarkPublishesAgainAndInboxAbsorbs(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 3)
	evs := newEvents(t, 300, 10)
	appendEvents(t, pool, topic, evs)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(),
		childEnv+"=1",
		childDBEnv+"="+pool.Config().ConnString(),
		childBrokersEnv+"="+strings.Join(brokers, ","))
	out, err := child.CombinedOutput()
	ws, _ := child.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("relay process was not killed between ack and mark: %v\n%s", err, out)
	}
	inTopic := readTopic(t, brokers, topic)
	var pending int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_pending`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if len(inTopic) != 100 || pending != 300 {
		t.Fatalf("after the crash: %d messages in the topic and %d rows pending, want 100 acked and all 300 unmarked", len(inTopic), pending)
	}

	// A new relay takes the dead one's shards once its leases expire, and
	// sends the unmarked rows again.
	_, stop := startRelays(t, pool, 1, outbox.Config{Brokers: brokers, LeaseTTL: 2 * time.Second})
	waitDrained(t, pool, 60*time.Second)
	stop()
	got := readTopic(t, brokers, topic)
	rep := checkDelivery(evs, got)
	t.Logf("after the crash and a new relay: %d messages, %v", len(got), rep)
	if rep.Lost != 0 || rep.Reordered != 0 || rep.Unknown != 0 {
		t.Fatalf("delivery: %v", rep)
	}
	if rep.Duplicates != 100 {
		t.Fatalf("%d duplicates, want the 100 acked-but-unmarked events sent again", rep.Duplicates)
	}

	// The inbox of a consumer absorbs the re-sends: one effect per event.
	consumer := pgtest.NewPool(t, consumerDB)
	reg := envelope.NewRegistry()
	envelope.Register[thing](reg, testEventType, 1)
	ib, err := inbox.New(reg, map[string]inbox.Handler{
		testEventType: func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
			_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, n) VALUES ($1, $2)`, d.Envelope.EventID, d.Payload.(thing).N)
			return inbox.Outcome{}, err
		},
	}, inbox.Options{Service: "outbox-test"})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for _, d := range got {
		err := pgx.BeginFunc(t.Context(), consumer, func(tx pgx.Tx) error {
			ds, err := ib.Decide(t.Context(), tx, []inbox.Message{{Raw: d.Value, Topic: topic, Partition: d.Partition, Offset: d.Offset}})
			for _, dec := range ds {
				outcomes[dec.Outcome]++
			}
			return err
		})
		if err != nil {
			t.Fatalf("decide: %v", err)
		}
	}
	var effects int
	if err := consumer.QueryRow(t.Context(), `SELECT count(*) FROM effect`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 300 || outcomes["applied"] != 300 || outcomes["duplicate"] != 100 {
		t.Fatalf("effects=%d decisions=%v, want 300 effects, 300 applied and 100 duplicate", effects, outcomes)
	}
}
