package app

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// Reconciliation returns the reconciliation sets invoice serves for the
// invoices of a period: the charges their charge and unpriced lines count
// (in usage event order; each of kind charge, its LineID naming its line), their adjustment and rounding lines and correction notes
// (by origin event), and their lines as the invoices show them.
func (a *App) Reconciliation() recon.Sets {
	return recon.Sets{
		recon.SetInvoiceCharges: recon.Set(a.reconciliationCharges),
		recon.SetInvoiceLines:   recon.Set(a.reconciliationLines),
		recon.SetCorrections:    recon.Set(a.reconciliationCorrections),
		recon.SetLineTotals:     recon.Set(a.reconciliationLineTotals),
	}
}

func (a *App) reconciliationCharges(ctx context.Context, q recon.Query) ([]recon.InvoiceLine, error) {
	rows, err := db.New(a.pool).ReconciliationCharges(ctx, db.ReconciliationChargesParams{TenantID: q.TenantID,
		Period: q.Period, AfterKey: q.After.Key, AfterID: q.After.ID, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read invoice charges of %s: %w", q.TenantID, err)
	}
	out := make([]recon.InvoiceLine, len(rows))
	for i, c := range rows {
		out[i] = recon.InvoiceLine{InvoiceID: c.InvoiceID, Issued: c.Issued, Period: c.Period, Currency: c.Currency,
			OriginEventID: c.OriginEventID, UsageEventID: c.UsageEventID, Kind: domain.KindCharge, Amount: c.Amount,
			Quantity: c.Quantity, LineID: domain.LineID(c.MeterCode, c.PriceVersion, c.DimensionsKey, c.Unpriced)}
	}
	return out, nil
}

func (a *App) reconciliationLines(ctx context.Context, q recon.Query) ([]recon.InvoiceLine, error) {
	rows, err := db.New(a.pool).ReconciliationLines(ctx, db.ReconciliationLinesParams{TenantID: q.TenantID,
		Period: q.Period, After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read invoice lines of %s: %w", q.TenantID, err)
	}
	out := make([]recon.InvoiceLine, len(rows))
	for i, l := range rows {
		lineID := domain.RoundingLineID
		if l.Kind == domain.KindAdjustment {
			lineID = domain.AdjustmentLineID(l.OriginEventID)
		}
		out[i] = recon.InvoiceLine{InvoiceID: l.InvoiceID, Issued: l.Issued, Period: l.Period, Currency: l.Currency,
			OriginEventID: l.OriginEventID, Kind: l.Kind, Amount: l.Amount, LineID: lineID}
	}
	return out, nil
}

func (a *App) reconciliationCorrections(ctx context.Context, q recon.Query) ([]recon.Correction, error) {
	rows, err := db.New(a.pool).ReconciliationCorrections(ctx, db.ReconciliationCorrectionsParams{TenantID: q.TenantID,
		Period: q.Period, After: q.After.Key, RowLimit: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read corrections of %s: %w", q.TenantID, err)
	}
	out := make([]recon.Correction, len(rows))
	for i, c := range rows {
		out[i] = recon.Correction{InvoiceID: c.InvoiceID, Period: c.Period, OriginEventID: c.OriginEventID, Amount: c.Amount}
	}
	return out, nil
}

// reconciliationLineTotals reads the lines of the period's invoices as the
// invoices show them (an open invoice's charge lines computed live) and
// returns those after the position. A period has an invoice per currency,
// each a line per meter and price version and per adjustment.
func (a *App) reconciliationLineTotals(ctx context.Context, q recon.Query) ([]recon.LineTotal, error) {
	var out []recon.LineTotal
	err := pgx.BeginTxFunc(ctx, a.pool, readOnly, func(tx pgx.Tx) error {
		qs := db.New(tx)
		rows, err := qs.ListPeriodsInvoices(ctx, db.ListPeriodsInvoicesParams{TenantID: q.TenantID, Periods: []string{q.Period}})
		if err != nil {
			return fmt.Errorf("read invoices of %s: %w", q.TenantID, err)
		}
		list := make([]db.ListInvoicesRow, len(rows))
		for i, row := range rows {
			list[i] = db.ListInvoicesRow(row)
		}
		invs, err := a.complete(ctx, qs, list, 0) // every line: the reconciliation pages them itself
		if err != nil {
			return err
		}
		for _, inv := range invs {
			for _, l := range inv.Lines {
				t := recon.LineTotal{InvoiceID: inv.InvoiceID, Currency: inv.Currency, LineID: l.LineID, Kind: l.Kind, MeterCode: l.MeterCode,
					PriceVersion: l.PriceVersion, ChargeCount: l.ChargeCount, Amount: l.Amount, PlanCode: l.PlanCode,
					PlanVersion: l.PlanVersion, FeeCode: l.FeeCode, Days: l.Days, PeriodDays: l.PeriodDays, TaxRate: l.TaxRate}
				if l.PlanCode != "" {
					t.Dimensions = l.Dimensions
				}
				if l.Quantity != nil {
					t.Quantity = *l.Quantity
				}
				if t.Pos().Compare(q.After) > 0 {
					out = append(out, t)
				}
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b recon.LineTotal) int { return a.Pos().Compare(b.Pos()) })
	return out[:min(len(out), q.Limit)], err
}
