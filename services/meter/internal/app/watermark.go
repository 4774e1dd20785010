package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/meter/internal/db"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

// PublishWatermarks publishes a PriceScheduleWatermark for every schedule
// shard whose published watermark runs out within half the lead (or that
// has none), in one transaction: each shard's watermark is raised to now +
// lead and announced through the outbox, under the shard's lock, so an
// activation either commits before it (and the watermark names its
// number) or after it (and must take effect after the watermark). The
// cost is one watermark per shard and round, however many series exist
// (decision 0019). It returns how many it published.
func (a *App) PublishWatermarks(ctx context.Context) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.EnsureScheduleShards(ctx, events.PlanShard); err != nil {
			return fmt.Errorf("create schedule shards: %w", err)
		}
		now := domain.Instant(a.now())
		refresh := now.Add(a.lead / 2)
		if a.lead == 0 {
			refresh = now.Add(time.Microsecond)
		}
		rows, err := q.LockShardsToPublish(ctx, &refresh)
		if err != nil {
			return fmt.Errorf("lock schedule shards to publish: %w", err)
		}
		through := now.Add(a.lead)
		envs := make([]envelope.Envelope, 0, len(rows))
		p := db.RaiseShardsKnownThroughParams{KnownThrough: &through}
		for _, r := range rows {
			if r.Shard > events.PlanShard {
				continue // not a shard of this contract
			}
			if r.KnownThrough != nil && !r.KnownThrough.Before(through) {
				continue // another instance's clock is ahead; its watermark stands
			}
			env, err := events.New(events.PriceScheduleWatermark{
				Shard: r.Shard, Shards: events.ScheduleShards, Seq: r.LastSeq, KnownThrough: through,
			}, events.Meta{
				Producer: Producer, TenantID: events.ScheduleTenant,
				AggregateID: events.PriceScheduleID(r.Shard, through), OccurredAt: now,
			})
			if err != nil {
				return err
			}
			envs = append(envs, env)
			p.Shards = append(p.Shards, r.Shard)
		}
		n = len(envs)
		if n == 0 {
			return nil
		}
		if err := q.RaiseShardsKnownThrough(ctx, p); err != nil {
			return fmt.Errorf("raise schedule watermarks: %w", err)
		}
		return events.Append(ctx, tx, envs...)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
