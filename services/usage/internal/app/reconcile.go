package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/usage/internal/db"
)

// Reconciliation returns the reconciliation set usage serves: its facts by
// month, in UsageAccepted event id order.
func (a *App) Reconciliation() recon.Sets {
	return recon.Sets{recon.SetUsageFacts: recon.Set(a.reconciliationFacts)}
}

func (a *App) reconciliationFacts(ctx context.Context, q recon.Query) ([]recon.UsageFact, error) {
	month, err := events.ParsePeriod(q.Period)
	if err != nil {
		return nil, err
	}
	rows, err := db.New(a.pool).ReconciliationFacts(ctx, db.ReconciliationFactsParams{TenantID: q.TenantID,
		Month: monthStart(month), After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read usage facts of %s: %w", q.TenantID, err)
	}
	out := make([]recon.UsageFact, len(rows))
	for i, r := range rows {
		out[i] = recon.UsageFact{EventID: r.EventID, UsageID: r.UsageID, MeterCode: r.MeterCode,
			Quantity: r.Quantity, Period: r.Period}
	}
	return out, nil
}

// monthStart is the month as the timestamp the index is on.
func monthStart(month time.Time) pgtype.Timestamp {
	return pgtype.Timestamp{Time: month, Valid: true}
}
