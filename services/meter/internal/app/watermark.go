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

// watermarkBatch bounds the series one transaction publishes.
const watermarkBatch = 500

// PublishWatermarks publishes a PriceScheduleWatermark for every series whose
// published watermark runs out within half the lead (or that has none), in
// transactions of at most watermarkBatch series: each series' watermark is
// raised to now + lead and announced through the outbox in the same
// transaction, under the series' lock, so an activation either commits
// before it (and the watermark names its version) or after it (and must
// take effect after the watermark). It returns how many it published.
func (a *App) PublishWatermarks(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := a.publishWatermarks(ctx)
		total += n
		if err != nil || n < watermarkBatch {
			return total, err
		}
	}
}

func (a *App) publishWatermarks(ctx context.Context) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		now := domain.Instant(a.now())
		refresh := now.Add(a.lead / 2)
		if a.lead == 0 {
			refresh = now.Add(time.Microsecond)
		}
		rows, err := q.LockSchedulesToPublish(ctx, db.LockSchedulesToPublishParams{RefreshBefore: &refresh, MaxRows: watermarkBatch})
		if err != nil {
			return fmt.Errorf("lock schedules to publish: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		through := now.Add(a.lead)
		envs := make([]envelope.Envelope, 0, len(rows))
		var p db.RaiseKnownThroughParams
		p.KnownThrough = &through
		for _, r := range rows {
			if r.KnownThrough != nil && !r.KnownThrough.Before(through) {
				continue // another instance's clock is ahead; its watermark stands
			}
			env, err := events.New(events.PriceScheduleWatermark{
				MeterCode: r.MeterCode, Currency: r.Currency, Version: r.LastVersion, KnownThrough: through,
			}, events.Meta{
				Producer: Producer, TenantID: r.TenantID,
				AggregateID: events.PriceScheduleID(r.MeterCode, r.Currency, through), OccurredAt: now,
			})
			if err != nil {
				return err
			}
			envs = append(envs, env)
			p.TenantIds = append(p.TenantIds, r.TenantID)
			p.MeterCodes = append(p.MeterCodes, r.MeterCode)
			p.Currencies = append(p.Currencies, r.Currency)
		}
		n = len(envs)
		if n == 0 {
			return nil
		}
		if err := q.RaiseKnownThrough(ctx, p); err != nil {
			return fmt.Errorf("raise schedule watermarks: %w", err)
		}
		return events.Append(ctx, tx, envs...)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
