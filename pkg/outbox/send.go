package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/pkg/tracing"
)

// pendingRow is one claimed outbox row.
type pendingRow struct {
	ID        int64
	EventID   uuid.UUID
	Topic     string
	Key       string
	EventType string
	Shard     int16
	Envelope  []byte
	CreatedAt time.Time
	Attempts  int
}

// afterSend, when set (only by tests), runs between the broker's ack and the
// mark (markSent): the crash test kills the process there.
var afterSend func()

// ClaimStatement reads, for each shard in $1 that this relay ($3) still
// holds, at most $2 of its oldest pending rows: one range scan of
// outbox_pending per shard (see the EXPLAIN test), never the whole backlog,
// and each entry's row by its key, in a LATERAL subquery with a LIMIT, which
// PostgreSQL does not flatten into a join: the plan is one probe of the
// primary key per entry, never a hash or merge join over the table. Shards
// are visited in the order given and the outer LIMIT cuts the last one
// short, so every shard contributes a prefix of its pending rows, which
// keeps per-key order.
const ClaimStatement = `
SELECT e.id, e.event_id, e.topic, e.partition_key, e.event_type, e.shard, e.envelope, e.created_at, e.attempts
FROM unnest($1::smallint[]) WITH ORDINALITY AS s(shard, n)
JOIN outbox_shard o ON o.shard = s.shard AND o.owner = $3 AND o.lease_until > now()
CROSS JOIN LATERAL (
    SELECT p.id, p.event_id FROM outbox_pending p
    WHERE p.shard = s.shard
    ORDER BY p.id
    LIMIT $2
) p
CROSS JOIN LATERAL (
    SELECT * FROM outbox_event e WHERE e.event_id = p.event_id LIMIT 1
) e
ORDER BY s.n, p.id
LIMIT $2`

// round claims up to a batch of rows from the relay's due shards, sends them,
// and marks the acknowledged ones sent. It returns how many rows it sent
// successfully.
func (r *Relay) round(ctx context.Context) (int, error) {
	due := r.dueShards()
	if len(due) == 0 {
		return 0, nil
	}
	rows, err := r.pool.Query(ctx, ClaimStatement, due, r.cfg.BatchSize, r.owner)
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pendingRow])
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	if len(claimed) == 0 {
		return 0, nil
	}

	spans := startSendSpans(ctx, claimed)
	failed := r.send(claimed)
	ackedAt := time.Now()
	endSendSpans(spans, failed)
	if afterSend != nil {
		afterSend()
	}

	// The sends are done: finish the bookkeeping even if ctx ends now, or a
	// clean shutdown would re-send what the broker already has.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var ok []pendingRow
	failedShards := map[int16]bool{}
	for i, row := range claimed {
		if _, bad := failed[i]; bad {
			failedShards[row.Shard] = true
			continue
		}
		ok = append(ok, row)
		r.metrics.commitToAck.Observe(ackedAt.Sub(row.CreatedAt).Seconds())
	}
	if err := r.markSent(bctx, ok); err != nil {
		return 0, err
	}
	for _, row := range claimed {
		if !failedShards[row.Shard] {
			delete(r.backoff, row.Shard)
		}
	}
	if len(failed) > 0 {
		if err := r.recordFailures(bctx, claimed, failed, failedShards); err != nil {
			return len(ok), err
		}
	}
	return len(ok), nil
}

// dueShards returns the held shards that are not backing off, rotated so
// that every shard gets its turn at the front of a batch.
func (r *Relay) dueShards() []int16 {
	now := time.Now()
	due := make([]int16, 0, len(r.shards))
	for i := range r.shards {
		s := r.shards[(i+r.rotate)%len(r.shards)]
		if w, ok := r.backoff[s]; ok && now.Before(w.until) {
			continue
		}
		due = append(due, s)
	}
	r.rotate++
	return due
}

// startSendSpans starts, when tracing is on, one "outbox send <topic>" span
// per row, each a child of its event's append span (the envelope's
// traceparent), so the send shows in the event's trace; nil when off.
func startSendSpans(ctx context.Context, rows []pendingRow) []trace.Span {
	if !tracing.Enabled() {
		return nil
	}
	spans := make([]trace.Span, len(rows))
	for i, row := range rows {
		parent := tracing.WithTraceparent(ctx, envelope.TraceparentOf(row.Envelope))
		_, spans[i] = tracing.StartSpan(parent, trace.SpanKindProducer, "outbox send", row.Topic)
		spans[i].SetAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", row.Topic),
			attribute.String("messaging.message.id", row.EventID.String()),
			attribute.String("messaging.kafka.message.key", row.Key),
			attribute.String("event.type", row.EventType),
			attribute.Int("outbox.attempt", row.Attempts+1))
	}
	return spans
}

// endSendSpans ends the spans of startSendSpans, a failed row's with its error.
func endSendSpans(spans []trace.Span, failed map[int]error) {
	for i, span := range spans {
		tracing.End(span, failed[i])
	}
}

// send produces the rows and returns the errors by row index. It waits for
// the broker's acknowledgement of every message (acks=all).
func (r *Relay) send(rows []pendingRow) map[int]error {
	failed := map[int]error{}
	if r.producer == nil {
		p, err := sarama.NewSyncProducer(r.cfg.Brokers, r.producerConfig())
		if err != nil {
			for i := range rows {
				failed[i] = fmt.Errorf("connect producer: %w", err)
			}
			return failed
		}
		r.producer = p
	}
	msgs := make([]*sarama.ProducerMessage, 0, len(rows))
	for i, row := range rows {
		// Append never writes an envelope over the limit; a row that is
		// (written before the limit, or by hand) is refused like a record
		// the broker refuses, and becomes a dead letter.
		if err := checkSize(row.EventType, len(row.Envelope)); err != nil {
			failed[i] = err
			continue
		}
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic:    row.Topic,
			Key:      sarama.StringEncoder(row.Key),
			Value:    sarama.ByteEncoder(row.Envelope),
			Metadata: i,
		})
	}
	if len(msgs) == 0 {
		return failed
	}
	refused := len(failed)
	err := r.producer.SendMessages(msgs)
	if err == nil {
		return failed
	}
	var perrs sarama.ProducerErrors
	if errors.As(err, &perrs) {
		for _, pe := range perrs {
			if i, ok := pe.Msg.Metadata.(int); ok {
				failed[i] = pe.Err
			}
		}
	}
	if len(failed) == refused {
		for _, m := range msgs {
			failed[m.Metadata.(int)] = err
		}
	}
	// A producer that failed may hold a broken connection or a fenced
	// idempotent sequence; start the next round with a fresh one.
	_ = r.producer.Close()
	r.producer = nil
	return failed
}

// producerConfig is kafkaconf's idempotent producer that sends a round in
// one request per broker. sarama's default sends the first message the
// moment it arrives, and with one request in flight per broker (and one
// batch in flight per partition, for the idempotent sequence) the rest
// follow in more requests, each after the previous one's ack: a round of
// 500 went out in 6-12 requests in turn, so it took that many round trips
// to the broker and reached the consumers in as many parts. Flushing at
// BatchSize messages, or Linger after a round's first, sends a round whole;
// messages larger than a request or a partition's batch still split it.
func (r *Relay) producerConfig() *sarama.Config {
	c := kafkaconf.NewIdempotentProducer(r.cfg.Name)
	c.Producer.Flush.Messages = r.cfg.BatchSize
	c.Producer.Flush.Frequency = r.cfg.Linger
	return c
}

// SentStatement deletes the pending entries of the rows ($1 their shards,
// $2 their ids) if the relay ($3) still owns their shards: those rows are
// sent. It writes nothing to outbox_event. Each entry is found by a probe of
// the primary key of its own (a scalar subquery) and deleted by its tuple id,
// so the plan is the same probes whatever the statistics of a table that is
// mostly dead entries between vacuums: as a join, a cached plan read the
// whole table at each call (34 ms a call instead of 1.5 in one run). The
// relay's shards are read once per statement (an InitPlan).
const SentStatement = `
		DELETE FROM outbox_pending p
		WHERE p.ctid = ANY (ARRAY(
		        SELECT (SELECT q.ctid FROM outbox_pending q WHERE q.shard = k.shard AND q.id = k.id)
		        FROM unnest($1::smallint[], $2::bigint[]) AS k(shard, id)))
		  AND p.shard = ANY (ARRAY(SELECT o.shard FROM outbox_shard o WHERE o.owner = $3))`

// markSent deletes the pending entries of rows the broker acknowledged,
// fenced on the relay's owner token: a relay whose lease was taken over
// deletes nothing, and its rows are sent again by the new owner (a duplicate
// the inbox absorbs, never a loss).
func (r *Relay) markSent(ctx context.Context, rows []pendingRow) error {
	if len(rows) == 0 {
		return nil
	}
	shards := make([]int16, len(rows))
	ids := make([]int64, len(rows))
	for i, row := range rows {
		shards[i], ids[i] = row.Shard, row.ID
	}
	tag, err := r.pool.Exec(ctx, SentStatement, shards, ids, r.owner)
	if err != nil {
		return fmt.Errorf("mark outbox rows sent (they will be sent again): %w", err)
	}
	if n := tag.RowsAffected(); n < int64(len(rows)) {
		r.log.Warn("lost shard lease before marking; rows will be sent again", "sent", len(rows), "marked", n)
	}
	r.metrics.published.Add(float64(tag.RowsAffected()))
	return nil
}

// failedStatement counts a failed attempt on each still pending row of $1
// (with its error $2; $3 whether the error blames the message) whose shard
// the relay ($5) still owns, makes it a dead letter when the message was to
// blame $4 times, and deletes a dead letter's pending entry; it returns the
// rows dead-lettered.
const failedStatement = `
		WITH f AS (
			UPDATE outbox_event e SET attempts = e.attempts + 1, last_error = f.err, last_attempt_at = now(),
			       dead_at = CASE WHEN f.permanent AND e.attempts + 1 >= $4 THEN now() END
			FROM unnest($1::uuid[], $2::text[], $3::bool[]) AS f(event_id, err, permanent), outbox_shard o
			WHERE e.event_id = f.event_id AND o.shard = e.shard AND o.owner = $5 AND e.dead_at IS NULL
			  AND EXISTS (SELECT 1 FROM outbox_pending p WHERE p.shard = e.shard AND p.id = e.id)
			RETURNING e.shard, e.id, e.dead_at
		), d AS (
			DELETE FROM outbox_pending p USING f
			WHERE f.dead_at IS NOT NULL AND p.shard = f.shard AND p.id = f.id
		)
		SELECT count(*) FILTER (WHERE dead_at IS NOT NULL) FROM f`

// recordFailures counts a failed attempt on each failed row, turns rows whose
// own content was refused too often into dead letters, and backs the failed
// shards off.
func (r *Relay) recordFailures(ctx context.Context, rows []pendingRow, failed map[int]error, shards map[int16]bool) error {
	ids := make([]uuid.UUID, 0, len(failed))
	msgs := make([]string, 0, len(failed))
	permanent := make([]bool, 0, len(failed))
	var sample error
	for i, err := range failed {
		ids = append(ids, rows[i].EventID)
		msgs = append(msgs, truncate(err.Error(), 500))
		permanent = append(permanent, blamesMessage(err))
		sample = err
	}
	r.metrics.failedAttempts.Add(float64(len(ids)))
	var dead int
	err := r.pool.QueryRow(ctx, failedStatement,
		ids, msgs, permanent, r.cfg.MaxAttempts, r.owner).Scan(&dead)
	if err != nil {
		return fmt.Errorf("record failed outbox attempts: %w", err)
	}
	now := time.Now()
	var longest time.Duration
	for s := range shards {
		w := r.backoff[s]
		w.failures++
		d := jitter(min(r.cfg.BackoffMin<<min(w.failures-1, 20), r.cfg.BackoffMax))
		w.until = now.Add(d)
		r.backoff[s] = w
		longest = max(longest, d)
	}
	r.log.Warn("outbox send failed; backing off", "failed", len(ids), "shards", len(shards),
		"backoff", longest.Round(time.Millisecond), "deadLettered", dead, "err", sample)
	return nil
}

// blamesMessage reports whether a send error is about the message itself
// (it will fail the same way on every try), as opposed to the broker or the
// network being unavailable, which is retried for as long as it lasts.
func blamesMessage(err error) bool {
	if errors.Is(err, envelope.ErrTooLarge) {
		return true
	}
	// sarama refuses an oversized message itself, before any broker sees it.
	var cerr sarama.ConfigurationError
	if errors.As(err, &cerr) {
		return true
	}
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		return false
	}
	// A topic the broker does not know or lets this producer not write to
	// (ErrUnknownTopicOrPartition, ErrTopicAuthorizationFailed) is the
	// broker's state, not the message's: a metadata glitch, a topic not
	// created yet, an ACL not granted yet. Every message to it is retried
	// until that is fixed; none is dead-lettered for it.
	switch kerr {
	case sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidMessage, sarama.ErrInvalidMessageSize,
		sarama.ErrInvalidRecord, sarama.ErrInvalidTopic:
		return true
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
