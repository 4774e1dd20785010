package app

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// liveLines computes the charge and unpriced lines of the open invoices
// among rows, by invoice id, each invoice's in ChargeLineSums' order, from
// the batches' parts of their lines (PartLineSums: invoice_line_part and
// the value sets' parts, written with the charges and folded past
// Config.PartsFoldAt, see foldParts), not from the charges: one statement
// an invoice, reading at most PartsFoldAt + 1 rows a line whatever the
// period's charges and batches number. The lines are the close's: the
// parts hold exactly the charges recorded on the open invoice, summed by
// the same line key (TestOpenInvoiceReadIsTheCloseOfItsParts). With most >
// 0 it returns ErrTooManyLines as soon as the lines are more than most.
func (a *App) liveLines(ctx context.Context, q *db.Queries, rows []db.ListInvoicesRow, most int) (map[uuid.UUID][]db.ChargeLineSumsRow, error) {
	out := map[uuid.UUID][]db.ChargeLineSumsRow{}
	total := 0
	for _, inv := range rows {
		if inv.Status != domain.StatusOpen {
			continue
		}
		sums, err := q.PartLineSums(ctx, db.PartLineSumsParams{TenantID: inv.TenantID, Period: inv.Period, Currency: inv.Currency})
		if err != nil {
			return nil, fmt.Errorf("sum the lines of open invoice %s: %w", inv.InvoiceID, err)
		}
		if total += len(sums); most > 0 && total > most {
			return nil, ErrTooManyLines
		}
		lines := make([]db.ChargeLineSumsRow, len(sums))
		for i, r := range sums {
			lines[i] = db.ChargeLineSumsRow(r)
		}
		out[inv.InvoiceID] = lines
	}
	return out, nil
}
