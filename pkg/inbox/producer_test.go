package inbox_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// ownedBy is an Authorize rule of the test domain: every event must come
// from topic and name producer.
func ownedBy(topic, producer string) func(string, *envelope.Envelope) bool {
	return func(got string, e *envelope.Envelope) bool { return got == topic && e.Producer == producer }
}

// from returns e as if producer had built it: the producer field is outside
// the payload's digest, so anyone can write any name there.
func from(e envelope.Envelope, producer string) envelope.Envelope {
	e.Producer = producer
	return e
}

// TestUnauthorizedProducerIsQuarantined decides a forgery (another producer,
// the genuine event's id and aggregate version, another payload) before the
// genuine event: the forgery is quarantined as unauthorized_producer, writes
// nothing and claims nothing, so the genuine event after it applies rather
// than meeting a digest conflict. The genuine event on a topic that is not its
// own is refused too.
func TestUnauthorizedProducerIsQuarantined(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{Authorize: ownedBy("test.events.v1", "test")})

	genuine := ev(t, "Noted", 1, "p", 1, note{Origin: origin("genuine")})
	forged := from(withPayload(t, genuine, `{"origin":"forged"}`), "intruder")
	got := outcomes(decide(t, ib, pool, raw(t, forged), raw(t, genuine)))
	want := []string{"quarantined:unauthorized_producer", "applied"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("decisions %q, want %q", got, want)
	}
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'forged'`); n != 0 {
		t.Fatalf("the forgery wrote %d effects", n)
	}
	var detail string
	if err := pool.QueryRow(t.Context(), `SELECT detail FROM inbox_quarantine WHERE reason = 'unauthorized_producer'`).
		Scan(&detail); err != nil {
		t.Fatal(err)
	}
	if want := `Noted from producer "intruder" on topic "test.events.v1"`; detail != want {
		t.Fatalf("detail %q, want %q", detail, want)
	}

	elsewhere := ev(t, "Noted", 1, "q", 1, note{Origin: origin("elsewhere")})
	var ds []inbox.Decision
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		ds, err = ib.Decide(t.Context(), tx, []inbox.Message{{Raw: raw(t, elsewhere), Topic: "other.events.v1"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(ds); got[0] != "quarantined:unauthorized_producer" {
		t.Fatalf("an event on another topic: %q", got)
	}
}

// TestRunnerQuarantinesForgedProducer consumes from a real broker a topic on
// which a forgery of another producer comes between two genuine events of one
// aggregate: the forgery is quarantined as unauthorized_producer, both
// genuine events apply, and the partition's offset moves past all three.
func TestRunnerQuarantinesForgedProducer(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{Service: "owner-check", Authorize: ownedBy(topic, "test")})

	first := ev(t, "Noted", 1, "r", 1, note{Origin: origin("ok")})
	second := ev(t, "Noted", 1, "r", 2, note{Origin: origin("ok")})
	forged := from(ev(t, "Noted", 1, "r", 2, note{Origin: "forged"}), "intruder")
	produce(t, brokers, topic, raw(t, first), raw(t, forged), raw(t, second))
	group := "inbox-" + topic
	rr := startRunner(t, pool, ib, brokers, group, topic, nil)
	eventually(t, "genuine events applied", 30*time.Second, func() bool {
		return len(effectVersions(t, pool, "r")) == 2
	})
	eventually(t, "the forgery quarantined", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE reason = 'unauthorized_producer'`) == 1
	})
	rr.stop(t)
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'forged'`); n != 0 {
		t.Fatalf("the forgery wrote %d effects", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine`); n != 1 {
		t.Fatalf("%d quarantines, want the forgery's alone", n)
	}
	if got := committed(t, brokers, group, topic); got != 3 {
		t.Fatalf("committed offset %d, want 3", got)
	}
}
