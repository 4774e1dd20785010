package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// ErrNotFound: the tenant has no invoice with that id.
var ErrNotFound = errors.New("invoice not found")

// Invoice is an invoice as read, with its lines and correction notes.
type Invoice struct {
	InvoiceID   uuid.UUID
	TenantID    string
	Period      string
	Currency    string
	Status      string
	Lines       []Line
	Subtotal    decimal.Decimal  // while open: the exact sum of the lines so far
	Total       *decimal.Decimal // nil while open
	IssuedAt    *time.Time       // nil while open
	Corrections []Correction
}

// Line is one invoice line.
type Line struct {
	OriginEventID uuid.UUID
	Kind          string
	Amount        decimal.Decimal
}

// Correction is a correction note issued after the invoice.
type Correction struct {
	CorrectionID  uuid.UUID
	OriginEventID uuid.UUID
	Amount        decimal.Decimal
	IssuedAt      time.Time
}

// Reader reads invoices, each read from one snapshot.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader on pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

var readOnly = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// Invoice returns the tenant's invoice id, or ErrNotFound (also for another
// tenant's invoice).
func (r *Reader) Invoice(ctx context.Context, tenantID string, id uuid.UUID) (Invoice, error) {
	var out Invoice
	err := pgx.BeginTxFunc(ctx, r.pool, readOnly, func(tx pgx.Tx) error {
		q := db.New(tx)
		row, err := q.GetInvoice(ctx, db.GetInvoiceParams{TenantID: tenantID, InvoiceID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("get invoice %s: %w", id, err)
		}
		invs, err := complete(ctx, q, []db.ListInvoicesRow{db.ListInvoicesRow(row)})
		if err != nil {
			return err
		}
		out = invs[0]
		return nil
	})
	return out, err
}

// Invoices returns the tenant's invoices of period, or of every period when
// period is empty, ordered by period and currency.
func (r *Reader) Invoices(ctx context.Context, tenantID, period string) ([]Invoice, error) {
	var out []Invoice
	err := pgx.BeginTxFunc(ctx, r.pool, readOnly, func(tx pgx.Tx) error {
		q := db.New(tx)
		rows, err := q.ListInvoices(ctx, db.ListInvoicesParams{
			TenantID: tenantID, Period: pgtype.Text{String: period, Valid: period != ""},
		})
		if err != nil {
			return fmt.Errorf("list invoices of %s: %w", tenantID, err)
		}
		out, err = complete(ctx, q, rows)
		return err
	})
	return out, err
}

// complete reads the lines and corrections of the invoices in rows.
func complete(ctx context.Context, q *db.Queries, rows []db.ListInvoicesRow) ([]Invoice, error) {
	out := make([]Invoice, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	ids := make([]uuid.UUID, len(rows))
	at := make(map[uuid.UUID]int, len(rows))
	for i, r := range rows {
		ids[i] = r.InvoiceID
		at[r.InvoiceID] = i
		out[i] = Invoice{
			InvoiceID: r.InvoiceID, TenantID: r.TenantID, Period: r.Period, Currency: r.Currency, Status: r.Status,
			Lines: []Line{}, Corrections: []Correction{},
		}
		if r.Status == domain.StatusIssued {
			total := r.Total.Decimal
			issuedAt := r.IssuedAt.UTC()
			out[i].Subtotal, out[i].Total, out[i].IssuedAt = r.Subtotal.Decimal, &total, &issuedAt
		}
	}
	lines, err := q.ListLines(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("list invoice lines: %w", err)
	}
	for _, l := range lines {
		inv := &out[at[l.InvoiceID]]
		inv.Lines = append(inv.Lines, Line{OriginEventID: l.OriginEventID, Kind: l.Kind, Amount: l.Amount})
		if inv.Status == domain.StatusOpen && l.Kind != domain.KindRounding {
			inv.Subtotal = inv.Subtotal.Add(l.Amount)
		}
	}
	corrections, err := q.ListCorrections(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("list invoice corrections: %w", err)
	}
	for _, c := range corrections {
		inv := &out[at[c.InvoiceID]]
		inv.Corrections = append(inv.Corrections, Correction{
			CorrectionID: c.CorrectionID, OriginEventID: c.OriginEventID, Amount: c.Amount, IssuedAt: c.IssuedAt.UTC(),
		})
	}
	return out, nil
}
