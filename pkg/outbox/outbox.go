// Package outbox is the transactional outbox: events are written in the same
// PostgreSQL transaction as the business change that caused them (Append), and
// a relay sends them to Kafka afterwards. A row is pending while it is listed
// in outbox_pending; the relay deletes its entry only once the broker has
// acknowledged it (decision 0027).
//
// Delivery is at least once: a relay that dies between the broker's ack and
// the deletion sends those rows again, and the consumers' inbox absorbs the
// duplicates. Order is kept per partition key: keys are hashed into NumShards
// shards, each shard is sent by one relay instance at a time under a lease,
// and a shard's rows go out in commit order in full batches, so one hot key is
// not throttled to one event per round.
package outbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/tracing"
)

// NumShards is the number of key shards. It is part of the schema (the
// outbox_shard rows) and of every stored row; changing it needs a migration
// that re-shards pending rows.
const NumShards = 64

// Channel is the LISTEN/NOTIFY channel an append notifies at commit.
const Channel = "outbox_event"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the outbox schema, tracked in its own migrations table so it
// can live beside a service's own schema.
var Migrations = pgmigrate.Set{FS: migrationFiles, Dir: "migrations", Table: "outbox_schema_migrations",
	Needs: []pgmigrate.Set{monthpart.Migrations}}

// Migrate applies the outbox schema to the database.
func Migrate(_ context.Context, databaseURL string) error {
	return pgmigrate.Up(databaseURL, Migrations)
}

// Shard returns the shard of a partition key.
func Shard(partitionKey string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(partitionKey))
	return int(h.Sum32() % NumShards)
}

// checkSize refuses an encoded envelope over envelope.MaxBytes.
func checkSize(eventType string, size int) error {
	if size > envelope.MaxBytes {
		return fmt.Errorf("%w: %s is %d bytes encoded, more than envelope.MaxBytes (%d)",
			envelope.ErrTooLarge, eventType, size, envelope.MaxBytes)
	}
	return nil
}

// Append writes events to the outbox inside tx, the business transaction that
// produced them: they are published if and only if tx commits. Events that
// share a partition key must be appended in their order (for an aggregate,
// under the aggregate's row lock), which is the order they are published in.
//
// Append refuses every event, writing none, when one is invalid or its
// encoding is over envelope.MaxBytes (an error wrapping envelope.ErrTooLarge):
// an oversized event is never written, so it can never be sent.
//
// Append is traced as "outbox append <topic>" (package tracing), and every
// event is written with that span's traceparent, so its consumers' spans join
// the trace; when tracing is off, with the traceparent ctx carries (the
// consumed event's or the request's), and when ctx carries none, with the
// event's own. The events passed are not modified.
func Append(ctx context.Context, tx pgx.Tx, topic string, events ...envelope.Envelope) (err error) {
	if len(events) == 0 {
		return nil
	}
	ctx, span := tracing.StartSpan(ctx, trace.SpanKindProducer, "outbox append", topic)
	defer func() { tracing.End(span, err) }()
	if span.IsRecording() {
		span.SetAttributes(appendAttributes(topic, events)...)
	}
	args, err := appendArgs(topic, tracing.Traceparent(ctx), events)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, AppendStatement, args...); err != nil {
		return fmt.Errorf("append to outbox: %w", err)
	}
	return nil
}

// appendAttributes describes an append in the OpenTelemetry messaging
// conventions (operation "create"); an event's id and type are given when
// the append has one event.
func appendAttributes(topic string, events []envelope.Envelope) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "create"),
		attribute.String("messaging.destination.name", topic),
		attribute.Int("messaging.batch.message_count", len(events)),
	}
	if len(events) == 1 {
		attrs = append(attrs, attribute.String("messaging.message.id", events[0].EventID.String()),
			attribute.String("event.type", events[0].EventType), attribute.String("tenant.id", events[0].TenantID))
	}
	return attrs
}

// QueueAppend queues on b the statement Append would run, for a caller that
// sends several statements of one transaction in one round trip (the inbox
// appends the events of a whole run of decisions so). b must be sent in the
// business transaction; its error is Append's. QueueAppend starts no span
// and writes each event's own traceparent: its caller traces the append (the
// inbox does, per event).
func QueueAppend(b *pgx.Batch, topic string, events ...envelope.Envelope) error {
	if len(events) == 0 {
		return nil
	}
	args, err := appendArgs(topic, "", events)
	if err != nil {
		return err
	}
	b.Queue(AppendStatement, args...)
	return nil
}

// AppendStatement inserts a call's events ($1 the topic; $2 to $6 the
// events' ids, partition keys, shards, types and envelopes) and lists them
// as pending in outbox_pending, in one statement; unnest keeps the argument
// order, so ids (and publish order) follow the order of events. The
// outbox's statements are exported for the floor benchmark (e2e/floor),
// which sends them, not copies, so it measures what runs.
const AppendStatement = `
		WITH e AS (
		    INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope)
		    SELECT e.event_id, $1, e.partition_key, e.shard, e.event_type, e.envelope
		    FROM unnest($2::uuid[], $3::text[], $4::smallint[], $5::text[], $6::bytea[])
		         WITH ORDINALITY AS e(event_id, partition_key, shard, event_type, envelope, n)
		    ORDER BY e.n
		    RETURNING shard, id, event_id
		)
		INSERT INTO outbox_pending (shard, id, event_id) SELECT shard, id, event_id FROM e`

// appendArgs encodes events for AppendStatement, each with traceparent when it is
// not empty.
func appendArgs(topic, traceparent string, events []envelope.Envelope) ([]any, error) {
	if topic == "" {
		return nil, errors.New("append to outbox: empty topic")
	}
	ids := make([][16]byte, len(events))
	keys := make([]string, len(events))
	shards := make([]int16, len(events))
	types := make([]string, len(events))
	bodies := make([][]byte, len(events))
	for i, ev := range events {
		if traceparent != "" {
			ev.Traceparent = traceparent
		}
		body, err := ev.Marshal()
		if err != nil {
			return nil, fmt.Errorf("append to outbox: %s %s: %w", ev.EventType, ev.EventID, err)
		}
		// Marshal refuses an oversized envelope; checked again here, where
		// the bytes are written, so no change to Marshal can let one through.
		if err := checkSize(ev.EventType, len(body)); err != nil {
			return nil, fmt.Errorf("append to outbox: %s %s: %w", ev.EventType, ev.EventID, err)
		}
		ids[i] = ev.EventID
		keys[i] = ev.PartitionKey
		shards[i] = int16(Shard(ev.PartitionKey))
		types[i] = ev.EventType
		bodies[i] = body
	}
	return []any{topic, ids, keys, shards, types, bodies}, nil
}
