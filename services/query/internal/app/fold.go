package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/services/query/internal/db"
)

// RunFolder moves the summary deltas the consumers insert into the folded
// totals every Config.FoldInterval until ctx ends, so a read adds up few
// rows and the table stays small. Folds of one tenant are serialised (an
// advisory lock); consumers never wait for them, and reads never wait
// either (see Summary). A failed fold is logged and tried again next
// interval.
func (a *App) RunFolder(ctx context.Context) error {
	t := time.NewTicker(a.cfg.FoldInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := a.FoldOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.WarnContext(ctx, "fold of summary deltas failed; next interval tries again", "err", err)
		}
	}
}

// FoldOnce folds the deltas of the tenants with the oldest pending deltas
// (up to 100 tenants), one transaction per tenant, and returns how many
// tenants it folded.
func (a *App) FoldOnce(ctx context.Context) (int, error) {
	tenants, err := db.New(a.pool).ListTenantsToFold(ctx, 10000)
	if err != nil {
		return 0, fmt.Errorf("list tenants to fold: %w", err)
	}
	n := 0
	for _, tenantID := range tenants[:min(len(tenants), 100)] {
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			q := db.New(tx)
			if err := q.LockTenantSummary(ctx, tenantID); err != nil {
				return fmt.Errorf("lock summary of %s: %w", tenantID, err)
			}
			if err := q.FoldDeltas(ctx, tenantID); err != nil {
				return fmt.Errorf("fold deltas of %s: %w", tenantID, err)
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		n++
		a.folded.Inc()
	}
	if left, err := db.New(a.pool).CountPendingDeltas(ctx); err == nil {
		a.pending.Set(float64(left))
	}
	return n, nil
}
