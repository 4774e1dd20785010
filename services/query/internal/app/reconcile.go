package app

import (
	"context"
	"fmt"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// Reconciliation returns the reconciliation sets query serves: its
// projection of the tenant's money flow, by month.
func (a *App) Reconciliation() recon.Sets {
	return recon.Sets{
		recon.SetUsageFacts:  recon.Set(a.reconciliationUsage),
		recon.SetCharges:     recon.Set(a.reconciliationCharges),
		recon.SetAdjustments: recon.Set(a.reconciliationAdjustments),
		recon.SetCorrections: recon.Set(a.reconciliationCorrections),
		recon.SetInvoices:    recon.Set(a.reconciliationInvoices),
		// Query's own, for its reconciliation: what its projected charges
		// contribute to their lines' aggregation.
		SetChargeObservations: recon.Set(a.reconciliationObservations),
	}
}

// SetChargeObservations is the set of what query's projected charges
// contribute to their lines' aggregation (domain.ChargeObservation).
const SetChargeObservations = "query-charge-observations"

func (a *App) reconciliationObservations(ctx context.Context, q recon.Query) ([]domain.ChargeObservation, error) {
	rows, err := db.New(a.pool).ReconciliationChargeObservations(ctx, db.ReconciliationChargeObservationsParams{TenantID: q.TenantID,
		Period: q.Period, AfterKey: q.After.Key, AfterID: q.After.ID, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read projected charge observations: %w", err)
	}
	out := make([]domain.ChargeObservation, len(rows))
	for i, c := range rows {
		out[i] = domain.ChargeObservation{EventID: c.EventID, UsageEventID: c.UsageEventID, Aggregation: c.Aggregation,
			Observation: catalog.Observation{Quantity: c.Quantity, OccurredAt: c.OccurredAt, SourceSystem: c.SourceSystem,
				SourceEventID: c.SourceEventID, Value: c.Value}}
	}
	return out, nil
}

func (a *App) reconciliationUsage(ctx context.Context, q recon.Query) ([]recon.UsageFact, error) {
	rows, err := db.New(a.pool).ReconciliationUsage(ctx, db.ReconciliationUsageParams{TenantID: q.TenantID,
		Period: q.Period, After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read projected usage: %w", err)
	}
	out := make([]recon.UsageFact, len(rows))
	for i, u := range rows {
		out[i] = recon.UsageFact{EventID: u.EventID, UsageID: u.UsageID, MeterCode: u.MeterCode, Quantity: u.Quantity, Period: u.Period}
	}
	return out, nil
}

func (a *App) reconciliationCharges(ctx context.Context, q recon.Query) ([]recon.Charge, error) {
	rows, err := db.New(a.pool).ReconciliationCharges(ctx, db.ReconciliationChargesParams{TenantID: q.TenantID,
		Period: q.Period, AfterKey: q.After.Key, AfterID: q.After.ID, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read projected charges: %w", err)
	}
	out := make([]recon.Charge, len(rows))
	for i, c := range rows {
		out[i] = recon.Charge{EventID: c.EventID, UsageEventID: c.UsageEventID, Currency: c.Currency,
			Quantity: c.Quantity, Amount: c.Amount, Period: c.Period}
	}
	return out, nil
}

func (a *App) reconciliationAdjustments(ctx context.Context, q recon.Query) ([]recon.Adjustment, error) {
	rows, err := db.New(a.pool).ReconciliationAdjustments(ctx, db.ReconciliationAdjustmentsParams{TenantID: q.TenantID,
		Period: q.Period, After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read projected adjustments: %w", err)
	}
	out := make([]recon.Adjustment, len(rows))
	for i, a := range rows {
		out[i] = recon.Adjustment{EventID: a.EventID, Currency: a.Currency, Amount: a.Amount, Period: a.Period}
	}
	return out, nil
}

func (a *App) reconciliationCorrections(ctx context.Context, q recon.Query) ([]recon.Correction, error) {
	rows, err := db.New(a.pool).ReconciliationCorrections(ctx, db.ReconciliationCorrectionsParams{TenantID: q.TenantID,
		Period: q.Period, After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read projected corrections: %w", err)
	}
	out := make([]recon.Correction, len(rows))
	for i, c := range rows {
		out[i] = recon.Correction{InvoiceID: c.InvoiceID, Period: c.Period, OriginEventID: c.OriginEventID, Amount: c.Amount}
	}
	return out, nil
}

func (a *App) reconciliationInvoices(ctx context.Context, q recon.Query) ([]recon.Invoice, error) {
	rows, err := db.New(a.pool).ReconciliationInvoices(ctx, db.ReconciliationInvoicesParams{TenantID: q.TenantID,
		Period: q.Period, After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read projected invoices: %w", err)
	}
	out := make([]recon.Invoice, len(rows))
	for i, v := range rows {
		out[i] = recon.Invoice{InvoiceID: v.InvoiceID, Period: v.Period, Currency: v.Currency, Total: v.Total}
	}
	return out, nil
}
