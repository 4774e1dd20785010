package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// ErrNotFound: the tenant has no invoice with that id.
var ErrNotFound = errors.New("invoice not found")

// ErrTooManyLines: the invoices a read would answer hold more lines and
// correction notes than Config.MaxReadLines (422 too_many_lines): a page
// of them is read with a smaller limit; one invoice that large alone is
// not answered whole (its charges are billing's to list, page by page).
var ErrTooManyLines = errors.New("too many invoice lines for one answer")

// Invoice is an invoice as read, with its lines and correction notes.
type Invoice struct {
	InvoiceID uuid.UUID
	Number    *int64 // nil until issued
	TenantID  string
	Period    string
	Currency  string
	Status    string
	Lines     []Line
	Subtotal  decimal.Decimal  // while open: the exact sum of the lines so far
	TaxTotal  decimal.Decimal  // the tax lines' sum (zero while open)
	Total     *decimal.Decimal // nil while open
	// CreditsApplied is the credit lines' sum (zero or negative) and
	// AmountDue Total + CreditsApplied: nil while open.
	CreditsApplied *decimal.Decimal
	AmountDue      *decimal.Decimal
	IssuedAt       *time.Time // nil while open
	Corrections    []Correction
}

// Line is one invoice line: a charge line aggregating the charges of one
// meter, price version and price dimensions, or an unpriced line
// aggregating a meter's unpriced charges (either computed from its charges
// while the invoice is open, stored at issue), an adjustment, or the
// rounding difference.
type Line struct {
	LineID        string // domain.LineID, AdjustmentLineID or RoundingLineID
	Kind          string
	MeterCode     string           // charge and unpriced lines
	PriceVersion  int64            // charge lines
	Quantity      *decimal.Decimal // charge and unpriced lines
	ChargeCount   int64            // charge and unpriced lines
	Amount        decimal.Decimal
	OriginEventID *uuid.UUID        // adjustment and rounding lines
	Dimensions    map[string]string // a charge line of a dimension price
	// PlanCode and PlanVersion: a charge line of a plan's charge (its
	// priceVersion is the plan's version too), a fixed-fee or true-up line.
	PlanCode    string
	PlanVersion int64
	// A fixed-fee line's fee, and the days of the period a fixed-fee or
	// true-up line is prorated by.
	FeeCode, Name    string
	Days, PeriodDays int
	// A tax line's code and rate (Name is its name).
	TaxCode string
	TaxRate *decimal.Decimal
	// A credit_applied line's grant.
	GrantID *uuid.UUID
}

// Correction is a correction note issued after the invoice.
type Correction struct {
	CorrectionID  uuid.UUID
	OriginEventID uuid.UUID
	Amount        decimal.Decimal
	IssuedAt      time.Time
}

// Position is the keyset position of an invoice in a tenant's list: the
// list is in (period, currency) order, one invoice per pair.
type Position struct {
	Period   string `json:"period"`
	Currency string `json:"currency"`
}

// PositionOf is the position of inv.
func PositionOf(inv Invoice) Position { return Position{Period: inv.Period, Currency: inv.Currency} }

// Now is the App's clock: the "now" of its commands and reads.
func (a *App) Now() time.Time { return a.now() }

// readOnly is how the App reads invoices: each read from one snapshot.
var readOnly = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// Invoice returns the tenant's invoice id, or ErrNotFound (also for another
// tenant's invoice).
func (a *App) Invoice(ctx context.Context, tenantID string, id uuid.UUID) (Invoice, error) {
	var out Invoice
	err := pgx.BeginTxFunc(ctx, a.pool, readOnly, func(tx pgx.Tx) error {
		q := db.New(tx)
		row, err := q.GetInvoice(ctx, db.GetInvoiceParams{TenantID: tenantID, InvoiceID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("get invoice %s: %w", id, err)
		}
		invs, err := a.complete(ctx, q, []db.ListInvoicesRow{db.ListInvoicesRow(row)}, a.maxReadLines)
		if err != nil {
			return err
		}
		out = invs[0]
		return nil
	})
	return out, err
}

// Invoices returns up to n of the tenant's invoices of period, or of every
// period when period is empty, in (period, currency) order, after position
// after (from the first when nil). The n-th, when there is one, is a page's
// look-ahead (page.Request.Fetch): it comes without its lines and
// corrections, and its lines do not count towards MaxReadLines.
func (a *App) Invoices(ctx context.Context, tenantID, period string, after *Position, n int32) ([]Invoice, error) {
	params := db.ListInvoicesParams{
		TenantID: tenantID, Period: pgtype.Text{String: period, Valid: period != ""}, PageSize: n,
	}
	if after != nil {
		params.AfterPeriod = pgtype.Text{String: after.Period, Valid: true}
		params.AfterCurrency = after.Currency
	}
	var out []Invoice
	err := pgx.BeginTxFunc(ctx, a.pool, readOnly, func(tx pgx.Tx) error {
		q := db.New(tx)
		rows, err := q.ListInvoices(ctx, params)
		if err != nil {
			return fmt.Errorf("list invoices of %s: %w", tenantID, err)
		}
		var last db.ListInvoicesRow
		if len(rows) > 0 {
			last = rows[len(rows)-1]
		}
		ahead := len(rows) == int(n) && n > 1
		if ahead {
			rows = rows[:n-1]
		}
		out, err = a.complete(ctx, q, rows, a.maxReadLines)
		if err == nil && ahead {
			out = append(out, invoiceOf(last))
		}
		return err
	})
	return out, err
}

// complete reads the lines and corrections of the invoices in rows: the
// stored lines, and for an open invoice its charge lines summed from its
// lines' parts (liveLines: one statement an invoice, bounded by its lines). With most
// > 0 it reads at most most+1 rows of each kind, and ErrTooManyLines when
// the lines and correction notes together are more than most: an answer's
// size and the work of building it do not grow with the tenant's adjustments,
// corrections and price dimensions.
func (a *App) complete(ctx context.Context, q *db.Queries, rows []db.ListInvoicesRow, most int) ([]Invoice, error) {
	out := make([]Invoice, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	ids := make([]uuid.UUID, len(rows))
	at := make(map[uuid.UUID]int, len(rows))
	for i, r := range rows {
		ids[i] = r.InvoiceID
		at[r.InvoiceID] = i
		out[i] = invoiceOf(r)
	}
	// Charge lines come first: the open invoices' live ones, then the
	// stored lines (an issued invoice's charge lines, adjustments, rounding).
	var limit pgtype.Int4
	if most > 0 {
		limit = pgtype.Int4{Int32: int32(most) + 1, Valid: true}
	}
	read := 0
	over := func(n int) bool {
		read += n
		return most > 0 && read > most
	}
	live, err := a.liveLines(ctx, q, rows, most)
	if err != nil {
		return nil, err
	}
	for i, r := range rows {
		if over(len(live[r.InvoiceID])) {
			return nil, ErrTooManyLines
		}
		for _, l := range live[r.InvoiceID] {
			line, err := liveLine(l)
			if err != nil {
				return nil, err
			}
			out[i].Lines = append(out[i].Lines, line)
			out[i].Subtotal = out[i].Subtotal.Add(line.Amount)
		}
	}
	stored, err := q.ListStoredLines(ctx, db.ListStoredLinesParams{InvoiceIds: ids, RowLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("list invoice lines: %w", err)
	}
	if over(len(stored)) {
		return nil, ErrTooManyLines
	}
	for _, l := range stored {
		inv := &out[at[l.InvoiceID]]
		line, err := storedLine(l)
		if err != nil {
			return nil, err
		}
		inv.Lines = append(inv.Lines, line)
		if inv.Status == domain.StatusOpen && l.Kind != domain.KindRounding {
			inv.Subtotal = inv.Subtotal.Add(l.Amount)
		}
	}
	for i, r := range rows {
		if r.Draft { // open, its period in grace (decision 0014)
			out[i].Status = domain.StatusDraft
		}
	}
	corrections, err := q.ListCorrections(ctx, db.ListCorrectionsParams{InvoiceIds: ids, RowLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("list invoice corrections: %w", err)
	}
	if over(len(corrections)) {
		return nil, ErrTooManyLines
	}
	for _, c := range corrections {
		inv := &out[at[c.InvoiceID]]
		inv.Corrections = append(inv.Corrections, Correction{
			CorrectionID: c.CorrectionID, OriginEventID: c.OriginEventID, Amount: c.Amount, IssuedAt: c.IssuedAt.UTC(),
		})
	}
	return out, nil
}

// invoiceOf is the invoice r heads, without lines or corrections yet; an
// issued one carries its number, subtotal, total and issue time.
func invoiceOf(r db.ListInvoicesRow) Invoice {
	inv := Invoice{
		InvoiceID: r.InvoiceID, TenantID: r.TenantID, Period: r.Period, Currency: r.Currency, Status: r.Status,
		Lines: []Line{}, Corrections: []Correction{},
	}
	if r.Status == domain.StatusIssued {
		number, total, issuedAt := r.Number.Int64, r.Total.Decimal, r.IssuedAt.UTC()
		inv.Number, inv.Subtotal, inv.Total, inv.IssuedAt = &number, r.Subtotal.Decimal, &total, &issuedAt
		inv.TaxTotal = r.TaxTotal
		credits, due := r.CreditsApplied, r.Total.Decimal
		if r.AmountDue.Valid { // issued before credits: nothing was drawn
			due = r.AmountDue.Decimal
		}
		inv.CreditsApplied, inv.AmountDue = &credits, &due
	}
	return inv
}

// liveLine is an open invoice's charge or unpriced line computed from its
// charges: its quantity the meter's aggregation so far; its amount its
// charges' under unit pricing of a sum or count meter, else its version's
// pricing over the quantity so far.
func liveLine(l db.ChargeLineSumsRow) (Line, error) {
	g, err := groupOf(l)
	if err != nil {
		return Line{}, err
	}
	priced, err := g.Price(false)
	if err != nil {
		return Line{}, err
	}
	return aggregateLine(g.Kind(), g.MeterCode, g.PriceVersion, g.DimensionsKey, priced.Quantity, g.ChargeCount, priced.Amount)
}

// aggregateLine is a charge or unpriced line.
func aggregateLine(kind, meterCode string, priceVersion int64, dimensionsKey string, quantity decimal.Decimal,
	chargeCount int64, amount decimal.Decimal) (Line, error) {
	plan, dims, err := domain.ParseDimensionsKey(dimensionsKey)
	if err != nil {
		return Line{}, err
	}
	l := Line{
		LineID: domain.LineID(meterCode, priceVersion, dimensionsKey, kind == domain.KindUnpriced), Kind: kind,
		MeterCode: meterCode, PriceVersion: priceVersion, Quantity: &quantity, ChargeCount: chargeCount,
		Amount: amount, Dimensions: dims, PlanCode: plan,
	}
	if plan != "" {
		l.PlanVersion = priceVersion
	}
	return l, nil
}

// storedLine is a stored line: an issued invoice's charge or unpriced line,
// an adjustment or the rounding difference.
func storedLine(l db.ListStoredLinesRow) (Line, error) {
	switch l.Kind {
	case domain.KindCharge, domain.KindUnpriced:
		return aggregateLine(l.Kind, l.MeterCode.String, l.PriceVersion.Int64, l.DimensionsKey, l.Quantity.Decimal,
			l.ChargeCount.Int64, l.Amount)
	case domain.KindAdjustment:
		origin := l.OriginEventID.UUID
		return Line{Kind: l.Kind, Amount: l.Amount, LineID: domain.AdjustmentLineID(origin), OriginEventID: &origin}, nil
	case events.FeeKindFixed, events.FeeKindTrueUp:
		return Line{Kind: l.Kind, Amount: l.Amount, LineID: domain.FeeLineID(l.Kind, l.PlanCode, l.PlanVersion, l.FeeCode),
			PlanCode: l.PlanCode, PlanVersion: l.PlanVersion, FeeCode: l.FeeCode, Name: l.FeeName,
			Days: int(l.Days), PeriodDays: int(l.PeriodDays)}, nil
	case domain.KindCredit:
		origin, id := l.OriginEventID.UUID, l.GrantID.UUID
		return Line{Kind: l.Kind, Amount: l.Amount, LineID: domain.CreditLineID(id), OriginEventID: &origin, GrantID: &id}, nil
	case domain.KindTax:
		origin, rate := l.OriginEventID.UUID, l.TaxRate
		return Line{Kind: l.Kind, Amount: l.Amount, LineID: domain.TaxLineID(l.TaxCode), OriginEventID: &origin,
			TaxCode: l.TaxCode, Name: l.TaxName, TaxRate: &rate}, nil
	default:
		origin := l.OriginEventID.UUID
		return Line{Kind: l.Kind, Amount: l.Amount, LineID: domain.RoundingLineID, OriginEventID: &origin}, nil
	}
}
