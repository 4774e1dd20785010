package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

type padded struct {
	Pad string `json:"pad"`
}

func paddedMeta(id string, version int64) envelope.Meta {
	return envelope.Meta{
		EventType: testEventType, SchemaVersion: 1, TenantID: "t1", AggregateType: "thing",
		AggregateID: id, AggregateVersion: version, OccurredAt: time.Now(), Producer: "outbox-test",
	}
}

// envelopeAtLimit builds with New an envelope whose encoding is exactly
// envelope.MaxBytes. The times' encodings drop trailing zeros of their
// fractions, so New is tried until the length comes out exact.
func envelopeAtLimit(t testing.TB, id string, version int64) envelope.Envelope {
	t.Helper()
	pad := envelope.MaxBytes / 2
	for range 50 {
		e, err := envelope.New(paddedMeta(id, version), padded{Pad: strings.Repeat("p", pad)})
		if errors.Is(err, envelope.ErrTooLarge) {
			pad--
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if len(body) == envelope.MaxBytes {
			return e
		}
		pad += envelope.MaxBytes - len(body)
	}
	t.Fatalf("could not build an envelope of exactly %d bytes", envelope.MaxBytes)
	return envelope.Envelope{}
}

// oversized returns an envelope with a payload of n bytes of padding, built
// past New's size check, and its encoding (bigger than envelope.MaxBytes
// when n is near it): what an envelope built before the limit looks like.
func oversized(t testing.TB, id string, n int) (envelope.Envelope, []byte) {
	t.Helper()
	e, err := envelope.New(paddedMeta(id, 1), padded{Pad: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Payload, err = envelope.Canonical([]byte(`{"pad":"` + strings.Repeat("p", n) + `"}`)); err != nil {
		t.Fatal(err)
	}
	if e.PayloadDigest, err = envelope.Digest(e.Payload); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return e, body
}

// insertRow writes an outbox row as Append would, without Append's checks.
func insertRow(t testing.TB, pool *pgxpool.Pool, topic string, e envelope.Envelope, body []byte) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
		WITH e AS (
			INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING shard, id, event_id)
		INSERT INTO outbox_pending (shard, id, event_id) SELECT shard, id, event_id FROM e`,
		e.EventID, topic, e.PartitionKey, outbox.Shard(e.PartitionKey), e.EventType, body)
	if err != nil {
		t.Fatal(err)
	}
}

func TestAppendRefusesEnvelopeOverMaxBytes(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	ctx := t.Context()
	healthy := newEvents(t, 2, 1)
	big, body := oversized(t, "big", envelope.MaxBytes)
	if len(body) <= envelope.MaxBytes {
		t.Fatalf("test envelope is %d bytes, want more than %d", len(body), envelope.MaxBytes)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = outbox.Append(ctx, tx, "things", healthy[0], big, healthy[1])
	if !errors.Is(err, envelope.ErrTooLarge) {
		t.Fatalf("Append of an oversized envelope: %v, want an error wrapping envelope.ErrTooLarge", err)
	}
	if reason, _ := envelope.ReasonOf(err); reason != envelope.ReasonTooLarge {
		t.Errorf("reason %q, want %q", reason, envelope.ReasonTooLarge)
	}
	if !strings.Contains(err.Error(), testEventType) || !strings.Contains(err.Error(), big.EventID.String()) {
		t.Errorf("error does not name the event: %v", err)
	}
	// Nothing was written, not even the healthy events beside it, and the
	// transaction is still usable.
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&n); err != nil {
		t.Fatalf("transaction after the refused Append: %v", err)
	}
	if n != 0 {
		t.Fatalf("refused Append wrote %d rows", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after commit (%v), want 0", n, err)
	}
}

// TestEnvelopeAtMaxBytesIsPublished sends an envelope of exactly
// envelope.MaxBytes, under the longest partition key there is, through the
// relay to the broker (kfake or, with TEST_KAFKA=apache, Apache Kafka) and
// reads it back byte for byte.
func TestEnvelopeAtMaxBytesIsPublished(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	var evs []envelope.Envelope
	var bodies [][]byte
	id := strings.Repeat("k", envelope.MaxIDLength)
	for v := range int64(3) { // three versions of one key: one batch, in order
		e := envelopeAtLimit(t, id, v+1)
		body, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		evs, bodies = append(evs, e), append(bodies, body)
	}
	appendEvents(t, pool, topic, evs)
	startRelays(t, pool, 1, outbox.Config{Brokers: brokers, MaxAttempts: 1})
	waitDrained(t, pool, 30*time.Second)
	var dead int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE dead_at IS NOT NULL`).Scan(&dead); err != nil || dead != 0 {
		t.Fatalf("%d dead letters (%v), want none", dead, err)
	}
	got := readTopic(t, brokers, topic)
	if len(got) != len(evs) {
		t.Fatalf("topic holds %d messages, want %d", len(got), len(evs))
	}
	for i, d := range got {
		if d.Envelope.EventID != evs[i].EventID || string(d.Value) != string(bodies[i]) || len(d.Value) != envelope.MaxBytes {
			t.Errorf("message %d: event %s of %d bytes, want %s of %d bytes as appended",
				i, d.Envelope.EventID, len(d.Value), evs[i].EventID, envelope.MaxBytes)
		}
	}
}
