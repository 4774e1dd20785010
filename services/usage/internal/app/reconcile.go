package app

import (
	"context"
	"fmt"

	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/usage/internal/db"
)

// ReconciliationRows returns the tenant's usage facts that occurred in
// periods, for reconciliation by their UsageAccepted event id.
func (a *App) ReconciliationRows(ctx context.Context, tenantID string, periods []string) (recon.Rows, error) {
	rows, err := db.New(a.pool).ReconciliationFacts(ctx, db.ReconciliationFactsParams{TenantID: tenantID, Periods: periods})
	if err != nil {
		return recon.Rows{}, fmt.Errorf("read usage facts of %s: %w", tenantID, err)
	}
	out := recon.Rows{UsageFacts: make([]recon.UsageFact, len(rows))}
	for i, r := range rows {
		out.UsageFacts[i] = recon.UsageFact{EventID: r.EventID, UsageID: r.UsageID, MeterCode: r.MeterCode,
			Quantity: r.Quantity, Period: r.Period}
	}
	return out, nil
}
