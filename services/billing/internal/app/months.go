package app

import (
	"context"
	"fmt"
	"time"

	"github.com/usagebilling/billing/services/billing/internal/db"
)

// MonthsAhead is how many months after the current one (UTC) keep a
// partition of charge ready (decision 0025): a charge's partition is the
// month of its charge_id, made when its fact is rated, so an insert never
// lacks one while the upkeep has run within the last three months.
const MonthsAhead = 3

// monthsEvery is how often RunMonths makes the partitions ahead; the
// migration makes them too, and a service restarted makes them at start.
const monthsEvery = time.Hour

// AddMonths makes the missing partitions of charge of this month and the
// MonthsAhead after it; how many it made.
func (a *App) AddMonths(ctx context.Context) (int, error) {
	n, err := db.New(a.pool).AddChargeMonths(ctx, MonthsAhead)
	if err != nil {
		return 0, fmt.Errorf("add charge partitions: %w", err)
	}
	return int(n), nil
}

// RunMonths calls AddMonths now and every hour until ctx ends; a failure is
// logged and tried again at the next round.
func (a *App) RunMonths(ctx context.Context) error {
	t := time.NewTicker(monthsEvery)
	defer t.Stop()
	for {
		n, err := a.AddMonths(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.WarnContext(ctx, "charge partitions ahead not made; retrying", "err", err, "every", monthsEvery)
		case n > 0:
			a.log.InfoContext(ctx, "charge partitions made", "made", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
