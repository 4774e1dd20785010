package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/invoice/internal/db"
)

// ReconciliationRows returns the lines and correction notes of the
// tenant's invoices of periods, read from one snapshot.
func (r *Reader) ReconciliationRows(ctx context.Context, tenantID string, periods []string) (recon.Rows, error) {
	var out recon.Rows
	err := pgx.BeginTxFunc(ctx, r.pool, readOnly, func(tx pgx.Tx) error {
		q := db.New(tx)
		lines, err := q.ReconciliationLines(ctx, db.ReconciliationLinesParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read invoice lines of %s: %w", tenantID, err)
		}
		corrs, err := q.ReconciliationCorrections(ctx, db.ReconciliationCorrectionsParams{TenantID: tenantID, Periods: periods})
		if err != nil {
			return fmt.Errorf("read corrections of %s: %w", tenantID, err)
		}
		out.InvoiceLines = make([]recon.InvoiceLine, len(lines))
		for i, l := range lines {
			out.InvoiceLines[i] = recon.InvoiceLine{InvoiceID: l.InvoiceID, Issued: l.Issued, Period: l.Period,
				Currency: l.Currency, OriginEventID: l.OriginEventID, Kind: l.Kind, Amount: l.Amount}
		}
		out.Corrections = make([]recon.Correction, len(corrs))
		for i, c := range corrs {
			out.Corrections[i] = recon.Correction{InvoiceID: c.InvoiceID, Period: c.Period, OriginEventID: c.OriginEventID, Amount: c.Amount}
		}
		return nil
	})
	return out, err
}
