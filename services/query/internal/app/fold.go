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
// rows and the table stays small. A tenant's deltas are folded in chunks of
// Config.FoldChunk, each its own transaction (foldTenant), so catching up
// after an outage is many bounded commits, not one statement that grows
// with the backlog. Folds of one tenant are serialised (an advisory lock,
// per chunk); consumers never wait for them, and reads never wait either
// (see Summary). A failed fold is logged and tried again next interval,
// from where its last chunk committed.
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
// (up to 100 tenants), each chunk by chunk (foldTenant), and returns how
// many tenants it folded. It folds no delta written after the round began
// (LastDeltaSeq), so a tenant written as fast as it is folded does not hold
// the round and the others wait for at most what was there.
func (a *App) FoldOnce(ctx context.Context) (int, error) {
	q := db.New(a.pool)
	through, err := q.LastDeltaSeq(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the last summary delta: %w", err)
	}
	tenants, err := q.ListTenantsToFold(ctx, 10000)
	if err != nil {
		return 0, fmt.Errorf("list tenants to fold: %w", err)
	}
	n := 0
	for _, tenantID := range tenants[:min(len(tenants), 100)] {
		if err := a.foldTenant(ctx, tenantID, through); err != nil {
			return n, err
		}
		n++
		a.folded.Inc()
	}
	if left, err := q.CountPendingDeltas(ctx); err == nil {
		a.pending.Set(float64(left))
	}
	return n, nil
}

// foldTenant folds a tenant's deltas up to seq through in chunks of
// Config.FoldChunk in seq order, each chunk its own transaction under the
// tenant's advisory lock (LockTenantSummary, as every fold of the tenant
// takes it): a chunk's deltas leave summary_delta and their sums arrive in
// tenant_total and tenant_summary in one commit (FoldDeltas), so a crash or
// a cancel between chunks loses nothing and folds nothing twice: the chunks
// committed stay folded, the rest stay pending (a summary still reads
// them), and the next round carries on. The position (the last seq folded)
// only spares each chunk's scan the rows the chunks before it deleted; a
// delta committed late below it is folded next round.
func (a *App) foldTenant(ctx context.Context, tenantID string, through int64) error {
	chunk := int64(a.cfg.FoldChunk)
	after := int64(0)
	for n := 1; ; n++ {
		var moved db.FoldDeltasRow
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			q := db.New(tx)
			if err := q.LockTenantSummary(ctx, tenantID); err != nil {
				return fmt.Errorf("lock summary of %s: %w", tenantID, err)
			}
			var err error
			moved, err = q.FoldDeltas(ctx, db.FoldDeltasParams{TenantID: tenantID, After: after, Through: through,
				ChunkSize: int32(chunk)})
			if err != nil {
				return fmt.Errorf("fold chunk %d of the deltas of %s: %w", n, tenantID, err)
			}
			if a.afterFoldChunk != nil {
				return a.afterFoldChunk(tenantID, moved.Deltas)
			}
			return nil
		})
		if err != nil || moved.Deltas < chunk {
			return err
		}
		after = moved.LastSeq
	}
}
