package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/services/usage/internal/db"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// Usage's watermarks (decision 0014): UsageAcceptedThrough {partition,
// through} on every partition of usage.events.v1 says that every
// UsageAccepted committed with an acceptance time before through is in
// that partition before it. A round of the publisher:
//
//  1. Cut: under the acceptance lock held exclusively (the accepting
//     transactions hold it shared, and take their acceptance time under it,
//     never before the last cut), through = max(now, last cut + 1µs) and
//     the highest id of the outbox rows not yet acknowledged are recorded.
//     Every fact accepted before through has then committed, its
//     UsageAccepted acknowledged already or at an outbox id at or below that
//     one; every later fact is accepted at or after through.
//  2. Publish: once no UsageAccepted at or below that id is waiting in the
//     outbox (published, i.e. acknowledged by the broker with acks=all; a
//     dead letter waits for ever, so a lost fact is never passed over), one
//     watermark per partition is appended to the outbox, keyed so that the
//     producer's hash partitioner sends it to its partition, behind the
//     facts it covers.

// ErrNoPartitions: the broker did not say how many partitions
// usage.events.v1 has.
var ErrNoPartitions = errors.New("usage topic partitions unknown")

// Partitions says how many partitions usage.events.v1 has now.
type Partitions func(ctx context.Context) (int32, error)

// PublishWatermarks runs one round: a new cut when the last one is
// published, then the cut's watermarks once its facts are acknowledged. It
// returns the through of the watermarks it appended (zero: none this round,
// the cut's facts are still on their way).
func (a *App) PublishWatermarks(ctx context.Context, partitions int32) (time.Time, error) {
	if partitions < 1 {
		return time.Time{}, ErrNoPartitions
	}
	cut, err := db.New(a.pool).AcceptanceCut(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read acceptance cut: %w", err)
	}
	if cut.Published {
		if cut, err = a.cut(ctx); err != nil {
			return time.Time{}, err
		}
	}
	acked, err := a.acknowledgedThrough(ctx, cut.OutboxThrough)
	if err != nil || !acked {
		return time.Time{}, err
	}
	published := false
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		now, err := q.LockAcceptanceCut(ctx)
		if err != nil {
			return fmt.Errorf("lock acceptance cut: %w", err)
		}
		if now.Published || !now.Through.Equal(cut.Through) {
			return nil // another instance published it
		}
		envs, err := watermarkEvents(cut.Through, partitions, domain.Instant(a.now()))
		if err != nil {
			return err
		}
		if err := q.MarkAcceptanceCutPublished(ctx, cut.Through); err != nil {
			return fmt.Errorf("mark acceptance cut published: %w", err)
		}
		published = true
		return events.Append(ctx, tx, envs...)
	})
	if err != nil || !published {
		return time.Time{}, err
	}
	return cut.Through, nil
}

// cut moves the acceptance cut to now (step 1).
func (a *App) cut(ctx context.Context) (db.AcceptanceCutRow, error) {
	var cut db.AcceptanceCutRow
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.LockAcceptanceExclusive(ctx); err != nil {
			return fmt.Errorf("lock acceptance: %w", err)
		}
		last, err := q.LockAcceptanceCut(ctx)
		if err != nil {
			return fmt.Errorf("lock acceptance cut: %w", err)
		}
		if !last.Published { // another instance cut meanwhile
			cut = db.AcceptanceCutRow(last)
			return nil
		}
		through := domain.Instant(a.now())
		if !through.After(last.Through) {
			through = last.Through.Add(time.Microsecond)
		}
		outboxThrough, err := outbox.HighestUnacknowledged(ctx, tx)
		if err != nil {
			return err
		}
		cut = db.AcceptanceCutRow{Through: through, OutboxThrough: outboxThrough}
		return q.SetAcceptanceCut(ctx, db.SetAcceptanceCutParams{Through: through, OutboxThrough: outboxThrough})
	})
	return cut, err
}

// acknowledgedThrough says whether every UsageAccepted at or below outbox
// id through is acknowledged by the broker. The cut's id is
// outbox.HighestUnacknowledged, read under the exclusive lock: every fact
// accepted before the cut is acknowledged already or at or below it, and
// every fact accepted after the cut takes a higher id (its insert follows
// the cut).
func (a *App) acknowledgedThrough(ctx context.Context, through int64) (bool, error) {
	waiting, err := outbox.UnacknowledgedThrough(ctx, a.pool, through, events.TypeUsageAccepted, events.TopicUsage)
	return !waiting, err
}

// watermarkEvents are the watermarks of one cut, one per partition, each
// keyed so that the relay's partitioner (sarama's hash partitioner,
// kafkaconf) sends it to its partition.
func watermarkEvents(through time.Time, partitions int32, now time.Time) ([]envelope.Envelope, error) {
	hash := sarama.NewHashPartitioner(events.TopicUsage)
	out := make([]envelope.Envelope, 0, partitions)
	for p := range partitions {
		id, err := watermarkID(hash, p, partitions, through)
		if err != nil {
			return nil, err
		}
		env, err := events.New(events.UsageAcceptedThrough{Partition: p, Partitions: partitions, Through: through},
			events.Meta{Producer: Producer, TenantID: events.UsageWatermarkTenant, AggregateID: id, OccurredAt: now})
		if err != nil {
			return nil, err
		}
		out = append(out, env)
	}
	return out, nil
}

// watermarkID is the first aggregate id of partition p's watermark whose
// partition key the hash partitioner sends to p (about partitions tries).
func watermarkID(hash sarama.Partitioner, p, partitions int32, through time.Time) (string, error) {
	for salt := range 1 << 16 {
		id := events.UsageWatermarkID(p, through, salt)
		key := envelope.PartitionKey(events.UsageWatermarkTenant, events.AggregateUsageWatermark, id)
		got, err := hash.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, partitions)
		if err != nil {
			return "", fmt.Errorf("partition of %s: %w", key, err)
		}
		if got == p {
			return id, nil
		}
	}
	return "", fmt.Errorf("no key of partition %d of %d found", p, partitions)
}

// RunWatermarks publishes watermarks every Config.WatermarkInterval until ctx ends (an idle
// usage service still advances them). A round whose facts are still on
// their way to the broker is finished at the next tick; a failed round (the
// database or the broker is down) is logged and tried again.
func (a *App) RunWatermarks(ctx context.Context, partitions Partitions) error {
	interval := a.cfg.WatermarkInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := partitions(ctx)
		if err == nil {
			err = a.publishSoon(ctx, n, interval)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.log.WarnContext(ctx, "publish usage watermarks failed; retrying", "err", err, "interval", interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ackPoll is how often a round looks again for the broker's acknowledgement
// of its cut's facts (the relay sends them within milliseconds when the
// broker is up).
const ackPoll = 25 * time.Millisecond

// publishSoon runs a round and, while its cut's facts are on their way,
// looks again every ackPoll for at most within: a watermark then trails its
// cut by the relay's latency, not by an interval.
func (a *App) publishSoon(ctx context.Context, partitions int32, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		through, err := a.PublishWatermarks(ctx, partitions)
		if err != nil || !through.IsZero() || time.Now().Add(ackPoll).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(ackPoll):
		}
	}
}
