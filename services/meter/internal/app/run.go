package app

import (
	"context"
	"time"
)

// Run is the meter's background work, a round every
// Config.WatermarkInterval until ctx ends: it publishes the MeterDefined of meters defined without one
// (PublishPendingMeters: the catalog migration's implied meters, published
// by the first round after the service starts), then the schedule
// watermarks due (PublishWatermarks). A failed round (the database is down)
// is logged and tried again next interval.
func (a *App) Run(ctx context.Context) error {
	interval := a.cfg.WatermarkInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a.round(ctx, interval)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *App) round(ctx context.Context, interval time.Duration) {
	if n, err := a.PublishPendingMeters(ctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		a.log.WarnContext(ctx, "publish pending meter definitions failed; retrying", "err", err, "interval", interval)
	} else if n > 0 {
		a.log.InfoContext(ctx, "meter definitions published", "meters", n)
	}
	if n, err := a.PublishWatermarks(ctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		a.log.WarnContext(ctx, "publish schedule watermarks failed; retrying", "err", err, "interval", interval)
	} else if n > 0 {
		a.log.DebugContext(ctx, "schedule watermarks published", "series", n)
	}
}
