package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// bulky is an event padded to a chosen size.
type bulky struct {
	Pad string `json:"pad"`
}

// bulkyAtLimit builds with New a Bulky envelope whose encoding is exactly
// envelope.MaxBytes. The times' encodings drop trailing zeros of their
// fractions, so New is tried until the length comes out exact.
func bulkyAtLimit(t testing.TB, aggregate string, version int64) envelope.Envelope {
	t.Helper()
	pad := envelope.MaxBytes / 2
	for range 50 {
		e, err := envelope.New(envelope.Meta{
			EventType: "Bulky", SchemaVersion: 1, TenantID: "t1",
			AggregateType: "thing", AggregateID: aggregate, AggregateVersion: version,
			OccurredAt: time.Now(), Producer: "test",
		}, bulky{Pad: strings.Repeat("p", pad)})
		if errors.Is(err, envelope.ErrTooLarge) {
			pad--
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := len(raw(t, e)); n != envelope.MaxBytes {
			pad += envelope.MaxBytes - n
			continue
		}
		return e
	}
	t.Fatalf("could not build an envelope of exactly %d bytes", envelope.MaxBytes)
	return envelope.Envelope{}
}

// bulkyInbox is the test inbox plus a Bulky handler that records an effect.
func bulkyInbox(t testing.TB, opts inbox.Options) *inbox.Inbox {
	t.Helper()
	reg := newRegistry()
	envelope.Register[bulky](reg, "Bulky", 1)
	hs := handlers(true)
	hs["Bulky"] = func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
		if n := len(d.Payload.(bulky).Pad); n < envelope.MaxBytes/2 {
			return inbox.Outcome{}, inbox.Permanent("short_pad", errors.New("padding lost"))
		}
		e := d.Envelope
		_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, origin, aggregate, version) VALUES ($1, $2, $3, $4)`,
			e.EventID, "bulky-"+e.EventID.String(), e.AggregateID, e.AggregateVersion)
		return inbox.Outcome{}, err
	}
	if opts.Service == "" {
		opts.Service = "test"
	}
	ib, err := inbox.New(reg, hs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// overLimit is a valid envelope but for its size: one at the limit with one
// byte of trailing whitespace.
func overLimit(t testing.TB) []byte {
	t.Helper()
	return append(raw(t, bulkyAtLimit(t, "over", 1)), ' ')
}

func TestDecideQuarantinesMessageOverMaxBytes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := bulkyInbox(t, inbox.Options{})
	big := overLimit(t)
	huge := []byte(`{"eventId":"` + strings.Repeat("x", 1<<20) + `"}`)
	ds := decide(t, ib, pool,
		big,
		raw(t, bulkyAtLimit(t, "at", 1)),
		huge,
		raw(t, ev(t, "Noted", 1, "h", 1, note{Origin: origin("ok")})),
	)
	wantOutcomes(t, ds, "quarantined:too_large", "applied", "quarantined:too_large", "applied")
	if got := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE reason = 'too_large' AND event_id IS NULL AND tenant_id IS NULL`); got != 2 {
		t.Fatalf("%d too_large quarantine rows without a hint, want 2", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE raw = $1`, big); got != 1 {
		t.Fatalf("the oversized message's bytes are not kept for an operator")
	}
}

var inboxOutboxTmpl = pgtest.Template{
	Name: "inbox_with_outbox",
	Migrate: func(ctx context.Context, databaseURL string) error {
		if err := tmpl.Migrate(ctx, databaseURL); err != nil {
			return err
		}
		return outbox.Migrate(ctx, databaseURL)
	},
}

// TestEnvelopeAtMaxBytesThroughRelayAndRunner appends envelopes of exactly
// envelope.MaxBytes to the outbox, lets the relay send them to the broker
// (kfake or, with TEST_KAFKA=apache, Apache Kafka) and a Runner decide them;
// a message one byte over the limit produced beside them is quarantined and
// does not stop the ones behind it.
func TestEnvelopeAtMaxBytesThroughRelayAndRunner(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	ib := bulkyInbox(t, inbox.Options{Service: "runner"})

	produce(t, brokers, topic, overLimit(t))
	evs := []envelope.Envelope{bulkyAtLimit(t, "b", 1), bulkyAtLimit(t, "b", 2), bulkyAtLimit(t, "b", 3)}
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.Append(t.Context(), tx, topic, evs...)
	}); err != nil {
		t.Fatalf("append: %v", err)
	}
	relay, err := outbox.NewRelay(pool, outbox.Config{Brokers: brokers, MaxAttempts: 1, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	startRunner(t, pool, ib, brokers, "inbox-"+topic, topic, prometheus.NewRegistry())

	eventually(t, "envelopes at the limit applied", 60*time.Second, func() bool {
		return len(effectVersions(t, pool, "b")) == 3
	})
	if got := effectVersions(t, pool, "b"); got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("effects %v, want versions 1, 2, 3 in order", got)
	}
	eventually(t, "oversized message quarantined", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE reason = 'too_large'`) == 1
	})
	// Not published: still pending or a dead letter.
	if got := count(t, pool, `
		SELECT count(*) FROM outbox_event e WHERE e.dead_at IS NOT NULL
		   OR EXISTS (SELECT 1 FROM outbox_pending p WHERE p.shard = e.shard AND p.id = e.id)`); got != 0 {
		t.Fatalf("%d outbox rows not published", got)
	}
}
