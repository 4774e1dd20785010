package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// Summary returns the tenant's summary: its folded totals plus the deltas not
// folded yet, read in one snapshot (a REPEATABLE READ transaction), so the
// figures are exact whether or not the folder (RunFolder) ran, or runs
// meanwhile: a fold's chunk moves its deltas into the totals in one commit,
// which the snapshot sees whole or not at all. The deltas not folded yet are
// read in chunks of Config.FoldChunk (pendingDeltas), so no statement of a
// read grows with a tenant's backlog. A tenant with no event has an
// all-zero summary. A read never writes and never waits for a fold.
func (a *App) Summary(ctx context.Context, tenantID string) (domain.Summary, error) {
	var out domain.Summary
	err := pgx.BeginTxFunc(ctx, a.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := db.New(tx)
		var lastEventAt *time.Time
		row, err := q.GetTenantSummary(ctx, tenantID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read summary of %s: %w", tenantID, err)
		default:
			at := row.LastEventAt.UTC()
			lastEventAt = &at
		}
		rows, pending, err := a.summaryTotals(ctx, q, tenantID)
		if err != nil {
			return err
		}
		if at := pending.lastEventAt; at != nil && (lastEventAt == nil || at.After(*lastEventAt)) {
			lastEventAt = at
		}
		totals := make([]domain.Total, 0, len(rows)+len(pending.totals))
		at := map[[2]string]int{}
		for _, t := range rows {
			at[[2]string{t.Kind, t.Key}] = len(totals)
			totals = append(totals, domain.Total{Kind: t.Kind, Key: t.Key, Amount: t.Amount, Events: t.Events})
		}
		for _, p := range pending.totals {
			if i, ok := at[[2]string{p.Kind, p.Key}]; ok {
				totals[i].Amount = totals[i].Amount.Add(p.Amount)
				totals[i].Events += p.Events
				continue
			}
			totals = append(totals, p)
		}
		if len(totals) > MaxSummaryTotals {
			return tooManyTotals()
		}
		out = domain.Summarize(tenantID, totals, lastEventAt)
		return nil
	})
	return out, err
}
