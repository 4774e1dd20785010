package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// MaxSummaryTotals is how many totals a tenant's summary answers: one per
// meter with usage (quantityByMeter) and one per currency of each of
// charged, adjusted and invoiced. A tenant with more is refused 422
// too_many_meters, so a summary's answer and its work do not grow without a
// bound with the meters a tenant uses; a meter's usage is
// read page by page at .../meters/{meterCode}/usage.
var MaxSummaryTotals = 10000

// CodeTooManyMeters: a tenant has more than MaxSummaryTotals totals.
const CodeTooManyMeters = "too_many_meters"

// summaryTotals reads the tenant's folded totals, at most
// MaxSummaryTotals+1 rows, and what its deltas not folded yet add
// (pendingDeltas), and refuses more than MaxSummaryTotals of either
// (tooManyTotals).
func (a *App) summaryTotals(ctx context.Context, q *db.Queries, tenantID string) ([]db.ListTenantTotalsRow, pendingSums, error) {
	limit := pgtype.Int4{Int32: int32(MaxSummaryTotals) + 1, Valid: true}
	rows, err := q.ListTenantTotals(ctx, db.ListTenantTotalsParams{TenantID: tenantID, RowLimit: limit})
	if err != nil {
		return nil, pendingSums{}, fmt.Errorf("read totals of %s: %w", tenantID, err)
	}
	if len(rows) > MaxSummaryTotals {
		return nil, pendingSums{}, tooManyTotals()
	}
	pending, err := a.pendingDeltas(ctx, q, tenantID)
	if err != nil {
		return nil, pendingSums{}, err
	}
	return rows, pending, nil
}

// pendingSums is what a tenant's deltas not folded yet add to its summary:
// their sums per kind and key ("seen" left out) and their latest
// occurredAt (nil: none).
type pendingSums struct {
	totals      []domain.Total
	lastEventAt *time.Time
}

// pendingDeltas reads the tenant's deltas not folded yet in chunks of
// Config.FoldChunk in seq order (PendingDeltaChunk, each statement at most
// that many deltas, whatever the backlog) and sums them in memory: exact,
// as every chunk reads the caller's one snapshot. More than
// MaxSummaryTotals sums is refused (tooManyTotals).
func (a *App) pendingDeltas(ctx context.Context, q *db.Queries, tenantID string) (pendingSums, error) {
	chunk := int64(a.cfg.FoldChunk)
	var p pendingSums
	at := map[[2]string]int{}
	after := int64(0)
	for {
		rows, err := q.PendingDeltaChunk(ctx, db.PendingDeltaChunkParams{TenantID: tenantID, After: after,
			ChunkSize: int32(chunk)})
		if err != nil {
			return pendingSums{}, fmt.Errorf("read pending deltas of %s: %w", tenantID, err)
		}
		if len(rows) == 0 {
			return p, nil
		}
		if a.afterReadChunk != nil {
			a.afterReadChunk(rows[0].ChunkDeltas)
		}
		for _, r := range rows {
			if p.lastEventAt == nil || r.LastEventAt.After(*p.lastEventAt) {
				t := r.LastEventAt.UTC()
				p.lastEventAt = &t
			}
			if r.Kind == domain.KindSeen {
				continue
			}
			k := [2]string{r.Kind, r.Key}
			if i, ok := at[k]; ok {
				p.totals[i].Amount = p.totals[i].Amount.Add(r.Amount)
				p.totals[i].Events += r.Events
				continue
			}
			if len(p.totals) == MaxSummaryTotals {
				return pendingSums{}, tooManyTotals()
			}
			at[k] = len(p.totals)
			p.totals = append(p.totals, domain.Total{Kind: r.Kind, Key: r.Key, Amount: r.Amount, Events: r.Events})
		}
		if rows[0].ChunkDeltas < chunk {
			return p, nil
		}
		after = rows[0].ChunkLast
	}
}

// tooManyTotals is the refusal of a summary of more than MaxSummaryTotals.
func tooManyTotals() error {
	return &rule.Error{Kind: rule.Unprocessable, Code: CodeTooManyMeters,
		Detail: fmt.Sprintf("the tenant has more than %d totals (meters with usage, and currencies) for one summary; "+
			"a meter's usage is read page by page at .../meters/{meterCode}/usage", MaxSummaryTotals)}
}
