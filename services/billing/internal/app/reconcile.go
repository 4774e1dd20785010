package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// ReconciliationRows returns the tenant's charges rated into periods or
// rating usage that occurred in them, and its adjustments of periods, read
// from one snapshot.
func (s *Service) ReconciliationRows(ctx context.Context, tenantID string, periods []string) (recon.Rows, error) {
	var out recon.Rows
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := db.New(tx)
		charges, err := q.ReconciliationCharges(ctx, db.ReconciliationChargesParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read charges of %s: %w", tenantID, err)
		}
		adjs, err := q.ReconciliationAdjustments(ctx, db.ReconciliationAdjustmentsParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read adjustments of %s: %w", tenantID, err)
		}
		out.Charges = make([]recon.Charge, len(charges))
		for i, c := range charges {
			out.Charges[i] = recon.Charge{EventID: c.EventID, UsageEventID: c.UsageEventID, Currency: c.Currency,
				Quantity: c.Quantity, Amount: c.Amount, Period: c.Period, OccurredPeriod: c.OccurredPeriod}
		}
		out.Adjustments = make([]recon.Adjustment, len(adjs))
		for i, a := range adjs {
			out.Adjustments[i] = recon.Adjustment{EventID: a.EventID, Currency: a.Currency, Amount: a.Amount, Period: a.Period}
		}
		return nil
	})
	return out, err
}
