package outbox

import (
	"bytes"
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
// mark: the crash test kills the process there.
var afterSend func()

// ClaimStatement reads, for each shard in $1 that this relay ($3) still
// holds, at most $2 of its oldest pending rows: one index range scan per shard (see the EXPLAIN
// test), never the whole backlog. Shards are visited in the order given and
// the outer LIMIT cuts the last one short, so every shard contributes a
// prefix of its pending rows, which keeps per-key order.
const ClaimStatement = `
SELECT e.id, e.event_id, e.topic, e.partition_key, e.event_type, e.shard, e.envelope, e.created_at, e.attempts
FROM unnest($1::smallint[]) WITH ORDINALITY AS s(shard, n)
JOIN outbox_shard o ON o.shard = s.shard AND o.owner = $3 AND o.lease_until > now()
CROSS JOIN LATERAL (
    SELECT id, event_id, topic, partition_key, event_type, shard, envelope, created_at, attempts
    FROM outbox_event
    WHERE shard = s.shard AND published_at IS NULL AND dead_at IS NULL
    ORDER BY id
    LIMIT $2
) e
ORDER BY s.n, e.id
LIMIT $2`

// round claims up to a batch of rows from the relay's due shards, sends them,
// and marks the acknowledged ones published. It returns how many rows it sent
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
	var okIDs []uuid.UUID
	failedShards := map[int16]bool{}
	for i, row := range claimed {
		if _, bad := failed[i]; bad {
			failedShards[row.Shard] = true
			continue
		}
		okIDs = append(okIDs, row.EventID)
		r.metrics.commitToAck.Observe(ackedAt.Sub(row.CreatedAt).Seconds())
	}
	if err := r.markPublished(bctx, okIDs); err != nil {
		return 0, err
	}
	for _, row := range claimed {
		if !failedShards[row.Shard] {
			delete(r.backoff, row.Shard)
		}
	}
	if len(failed) > 0 {
		if err := r.recordFailures(bctx, claimed, failed, failedShards); err != nil {
			return len(okIDs), err
		}
	}
	return len(okIDs), nil
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
		p, err := sarama.NewSyncProducer(r.cfg.Brokers, kafkaconf.NewIdempotentProducer(r.cfg.Name))
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

// MarkStatement marks the rows of ids ($1) published if the relay ($2) still
// owns their shards. The ids' range ($3, $4: MarkRange) lets PostgreSQL leave out, as
// the statement starts, every day's partition that cannot hold one of them
// (it cannot prune by the array itself): without it each id is probed in
// every day's index (TestMarkReadsOnlyTheIdsDays).
const MarkStatement = `
		UPDATE outbox_event e SET published_at = now()
		FROM outbox_shard o
		WHERE e.event_id = ANY($1) AND e.event_id BETWEEN $3 AND $4
		  AND o.shard = e.shard AND o.owner = $2 AND e.published_at IS NULL`

// MarkRange is the smallest and the largest of ids (at least one), in
// PostgreSQL's order of uuid values (their bytes').
func MarkRange(ids []uuid.UUID) (lo, hi uuid.UUID) {
	lo, hi = ids[0], ids[0]
	for _, id := range ids[1:] {
		if bytes.Compare(id[:], lo[:]) < 0 {
			lo = id
		}
		if bytes.Compare(id[:], hi[:]) > 0 {
			hi = id
		}
	}
	return lo, hi
}

// markPublished marks rows published, fenced on the relay's owner token: a
// relay whose lease was taken over marks nothing, and its rows are sent again
// by the new owner (a duplicate the inbox absorbs, never a loss).
func (r *Relay) markPublished(ctx context.Context, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	lo, hi := MarkRange(ids)
	tag, err := r.pool.Exec(ctx, MarkStatement, ids, r.owner, lo, hi)
	if err != nil {
		return fmt.Errorf("mark outbox rows published (they will be sent again): %w", err)
	}
	if n := tag.RowsAffected(); n < int64(len(ids)) {
		r.log.Warn("lost shard lease before marking; rows will be sent again", "sent", len(ids), "marked", n)
	}
	r.metrics.published.Add(float64(tag.RowsAffected()))
	return nil
}

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
	err := r.pool.QueryRow(ctx, `
		WITH f AS (
			UPDATE outbox_event e SET attempts = e.attempts + 1, last_error = f.err, last_attempt_at = now(),
			       dead_at = CASE WHEN f.permanent AND e.attempts + 1 >= $4 THEN now() END
			FROM unnest($1::uuid[], $2::text[], $3::bool[]) AS f(event_id, err, permanent), outbox_shard o
			WHERE e.event_id = f.event_id AND o.shard = e.shard AND o.owner = $5
			  AND e.published_at IS NULL AND e.dead_at IS NULL
			RETURNING e.dead_at
		)
		SELECT count(*) FILTER (WHERE dead_at IS NOT NULL) FROM f`,
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
