package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// ReconciliationRows returns what the tenant's invoices of periods count,
// read from one snapshot: InvoiceLines one row per origin event (each charge
// with the charge line that counts it, each adjustment line, each rounding
// line), LineTotals the lines as the invoices show them, and the correction
// notes.
func (r *Reader) ReconciliationRows(ctx context.Context, tenantID string, periods []string) (recon.Rows, error) {
	var out recon.Rows
	err := pgx.BeginTxFunc(ctx, r.pool, readOnly, func(tx pgx.Tx) error {
		q := db.New(tx)
		charges, err := q.ReconciliationCharges(ctx, db.ReconciliationChargesParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read invoice charges of %s: %w", tenantID, err)
		}
		lines, err := q.ReconciliationLines(ctx, db.ReconciliationLinesParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read invoice lines of %s: %w", tenantID, err)
		}
		corrs, err := q.ReconciliationCorrections(ctx, db.ReconciliationCorrectionsParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read corrections of %s: %w", tenantID, err)
		}
		invRows, err := q.ListPeriodsInvoices(ctx, db.ListPeriodsInvoicesParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read invoices of %s: %w", tenantID, err)
		}
		rows := make([]db.ListInvoicesRow, len(invRows))
		for i, r := range invRows {
			rows[i] = db.ListInvoicesRow(r)
		}
		invs, err := complete(ctx, q, rows)
		if err != nil {
			return err
		}

		out.InvoiceLines = make([]recon.InvoiceLine, 0, len(charges)+len(lines))
		for _, c := range charges {
			out.InvoiceLines = append(out.InvoiceLines, recon.InvoiceLine{InvoiceID: c.InvoiceID, Issued: c.Issued,
				Period: c.Period, Currency: c.Currency, OriginEventID: c.OriginEventID, Kind: domain.KindCharge,
				Amount: c.Amount, Quantity: c.Quantity, LineID: domain.ChargeLineID(c.MeterCode, c.PriceVersion)})
		}
		for _, l := range lines {
			lineID := domain.RoundingLineID
			if l.Kind == domain.KindAdjustment {
				lineID = domain.AdjustmentLineID(l.OriginEventID)
			}
			out.InvoiceLines = append(out.InvoiceLines, recon.InvoiceLine{InvoiceID: l.InvoiceID, Issued: l.Issued,
				Period: l.Period, Currency: l.Currency, OriginEventID: l.OriginEventID, Kind: l.Kind, Amount: l.Amount,
				LineID: lineID})
		}
		out.LineTotals = []recon.LineTotal{}
		for _, inv := range invs {
			for _, l := range inv.Lines {
				t := recon.LineTotal{InvoiceID: inv.InvoiceID, LineID: l.LineID, Kind: l.Kind, MeterCode: l.MeterCode,
					PriceVersion: l.PriceVersion, ChargeCount: l.ChargeCount, Amount: l.Amount}
				if l.Quantity != nil {
					t.Quantity = *l.Quantity
				}
				out.LineTotals = append(out.LineTotals, t)
			}
		}
		out.Corrections = make([]recon.Correction, len(corrs))
		for i, c := range corrs {
			out.Corrections[i] = recon.Correction{InvoiceID: c.InvoiceID, Period: c.Period, OriginEventID: c.OriginEventID, Amount: c.Amount}
		}
		return nil
	})
	return out, err
}
