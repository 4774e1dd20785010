package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/query/internal/db"
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

// summaryTotals reads the tenant's folded totals and the sums of its deltas
// not folded yet, each statement at most MaxSummaryTotals+1 rows, and
// refuses more than MaxSummaryTotals of either (tooManyTotals).
func summaryTotals(ctx context.Context, q *db.Queries, tenantID string) ([]db.ListTenantTotalsRow, []db.ListPendingTotalsRow, error) {
	limit := pgtype.Int4{Int32: int32(MaxSummaryTotals) + 1, Valid: true}
	rows, err := q.ListTenantTotals(ctx, db.ListTenantTotalsParams{TenantID: tenantID, RowLimit: limit})
	if err != nil {
		return nil, nil, fmt.Errorf("read totals of %s: %w", tenantID, err)
	}
	prows, err := q.ListPendingTotals(ctx, db.ListPendingTotalsParams{TenantID: tenantID, RowLimit: limit})
	if err != nil {
		return nil, nil, fmt.Errorf("read pending totals of %s: %w", tenantID, err)
	}
	if len(rows) > MaxSummaryTotals || len(prows) > MaxSummaryTotals {
		return nil, nil, tooManyTotals()
	}
	return rows, prows, nil
}

// tooManyTotals is the refusal of a summary of more than MaxSummaryTotals.
func tooManyTotals() error {
	return &rule.Error{Kind: rule.Unprocessable, Code: CodeTooManyMeters,
		Detail: fmt.Sprintf("the tenant has more than %d totals (meters with usage, and currencies) for one summary; "+
			"a meter's usage is read page by page at .../meters/{meterCode}/usage", MaxSummaryTotals)}
}
