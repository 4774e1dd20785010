package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// Reconciliation returns the reconciliation sets billing serves: the months
// a period's reconciliation reads, its charges in usage event order and its
// adjustments. Usage and query group facts by the UTC month they occurred
// in; a charge rated into another period than that month (late, or a
// tenant in another time zone) is served from both (see recon.SetMonths).
func (a *App) Reconciliation() recon.Sets {
	return recon.Sets{
		recon.SetMonths:      recon.Set(a.reconciliationMonths),
		recon.SetCharges:     recon.Set(a.reconciliationCharges),
		recon.SetAdjustments: recon.Set(a.reconciliationAdjustments),
	}
}

func (a *App) reconciliationMonths(ctx context.Context, q recon.Query) ([]recon.Month, error) {
	month, err := monthOf(q.Period)
	if err != nil {
		return nil, err
	}
	periods, err := db.New(a.pool).ReconciliationMonths(ctx, db.ReconciliationMonthsParams{TenantID: q.TenantID,
		Period: q.Period, Month: month})
	if err != nil {
		return nil, fmt.Errorf("read the months of %s %s: %w", q.TenantID, q.Period, err)
	}
	out := make([]recon.Month, len(periods))
	for i, p := range periods {
		out[i] = recon.Month{Period: p}
	}
	return out, nil
}

// reconciliationCharges reads a page of the period's charges and of the
// off-month charges of the UTC month of the same name. Each carries the
// period its usage occurred in by the tenant's calendar (decision 0014), so
// a reconciliation sees a charge rated into another period than that one
// without being late (or late into an earlier one).
func (a *App) reconciliationCharges(ctx context.Context, q recon.Query) ([]recon.Charge, error) {
	month, err := monthOf(q.Period)
	if err != nil {
		return nil, err
	}
	rows, err := db.New(a.pool).ReconciliationCharges(ctx, db.ReconciliationChargesParams{TenantID: q.TenantID,
		Period: q.Period, Month: month, AfterKey: q.After.Key, AfterID: q.After.ID, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read charges of %s: %w", q.TenantID, err)
	}
	cals, err := calendars(ctx, a.pool, q.TenantID)
	if err != nil {
		return nil, err
	}
	out := make([]recon.Charge, len(rows))
	for i, c := range rows {
		out[i] = recon.Charge{EventID: c.EventID, UsageEventID: c.UsageEventID, Currency: c.Currency,
			Quantity: c.Quantity, Amount: c.Amount, Period: c.Period, Late: c.Late,
			OccurredPeriod: cals.Period(q.TenantID, c.OccurredAt)}
	}
	return out, nil
}

func (a *App) reconciliationAdjustments(ctx context.Context, q recon.Query) ([]recon.Adjustment, error) {
	rows, err := db.New(a.pool).ReconciliationAdjustments(ctx, db.ReconciliationAdjustmentsParams{TenantID: q.TenantID,
		Period: q.Period, After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read adjustments of %s: %w", q.TenantID, err)
	}
	out := make([]recon.Adjustment, len(rows))
	for i, adj := range rows {
		out[i] = recon.Adjustment{EventID: adj.EventID, Currency: adj.Currency, Amount: adj.Amount, Period: adj.Period}
	}
	return out, nil
}

// monthOf is a period as the timestamp of its first instant (UTC), as the
// reconciliation indexes hold occurrence months.
func monthOf(period string) (pgtype.Timestamp, error) {
	t, err := events.ParsePeriod(period)
	if err != nil {
		return pgtype.Timestamp{}, err
	}
	return pgtype.Timestamp{Time: t, Valid: true}, nil
}
