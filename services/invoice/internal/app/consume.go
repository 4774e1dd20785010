// Package app is the invoice service's application layer: the inbox handlers
// that turn billing's events into invoice lines, issued invoices and
// correction notes (with their events appended to the outbox in the same
// transaction), and the reads behind the HTTP API.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// Producer is the envelope producer name of the events this service publishes.
const Producer = "invoice"

// Quarantine reasons of the handlers (inbox.Permanent).
const (
	// ReasonChargeAfterIssue: a ChargeRated for a period whose invoices are
	// issued. Billing rates late usage into the next open period, so this is
	// a contract breach, never retried.
	ReasonChargeAfterIssue = "charge_after_issue"
	// ReasonNoInvoiceToCorrect: an AdjustmentPosted for a closed period in a
	// currency that period has no invoice in.
	ReasonNoInvoiceToCorrect = "no_invoice_to_correct"
	// ReasonCloseCountsMismatch: the period's invoices hold more charge or
	// adjustment lines than the close counted.
	ReasonCloseCountsMismatch = "close_counts_mismatch"
	// ReasonCloseTotalsMismatch: every counted line is present but a
	// currency's lines do not sum to the close's total.
	ReasonCloseTotalsMismatch = "close_totals_mismatch"
	// ReasonPeriodMismatch: the payload's period is not the billing_period
	// aggregate the event belongs to.
	ReasonPeriodMismatch = "period_mismatch"
)

// LinesKey is the inbox wait key of a tenant period's invoice lines: every
// charge or adjustment line added provides it, and a BillingPeriodClosed that
// finds fewer lines than it counted is deferred until it (and re-decided by
// the inbox sweep as well). Given the billing_period aggregate's version
// order this should never be needed: a close at version N is applied only
// after the N-1 events it counts.
func LinesKey(tenantID, period string) string {
	return "invoice-lines/" + tenantID + "/" + period
}

// Consumer applies billing's events.
type Consumer struct {
	log *slog.Logger
	now func() time.Time
}

// NewConsumer returns the consumer; log receives its notices.
func NewConsumer(log *slog.Logger) *Consumer {
	return &Consumer{log: log, now: time.Now}
}

// Handlers maps the consumed event types to their inbox handlers.
func (c *Consumer) Handlers() map[string]inbox.Handler {
	return map[string]inbox.Handler{
		events.TypeChargeRated:         c.onChargeRated,
		events.TypeAdjustmentPosted:    c.onAdjustmentPosted,
		events.TypeBillingPeriodClosed: c.onPeriodClosed,
	}
}

// Topics are the topics the handlers consume.
var Topics = []string{events.TopicBilling}

func (c *Consumer) onChargeRated(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
	p := d.Payload.(events.ChargeRated)
	e := &d.Envelope
	if err := checkPeriod(e, p.Period); err != nil {
		return inbox.Outcome{}, err
	}
	row, err := addLine(ctx, tx, e, p.Period, p.Currency, domain.KindCharge, p.Amount)
	switch {
	case err != nil:
		return inbox.Outcome{}, err
	case row.Added:
		return inbox.Outcome{Provides: []string{LinesKey(e.TenantID, p.Period)}}, nil
	case row.Closed || row.Status == domain.StatusIssued:
		return inbox.Outcome{}, inbox.Permanent(ReasonChargeAfterIssue,
			fmt.Errorf("charge %s for %s %s: the period is closed and its invoices issued", p.ChargeID, e.TenantID, p.Period))
	default:
		return inbox.Outcome{}, errConcurrentInvoice
	}
}

func (c *Consumer) onAdjustmentPosted(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
	p := d.Payload.(events.AdjustmentPosted)
	e := &d.Envelope
	if err := checkPeriod(e, p.Period); err != nil {
		return inbox.Outcome{}, err
	}
	row, err := addLine(ctx, tx, e, p.Period, p.Currency, domain.KindAdjustment, p.Amount)
	switch {
	case err != nil:
		return inbox.Outcome{}, err
	case row.Added:
		return inbox.Outcome{Provides: []string{LinesKey(e.TenantID, p.Period)}}, nil
	case row.Status == domain.StatusIssued:
		return inbox.Outcome{}, c.correct(ctx, tx, e, p, row.InvoiceID)
	case row.Closed:
		return inbox.Outcome{}, inbox.Permanent(ReasonNoInvoiceToCorrect,
			fmt.Errorf("adjustment %s for %s %s: the period is closed and has no %s invoice", p.AdjustmentID, e.TenantID, p.Period, p.Currency))
	default:
		return inbox.Outcome{}, errConcurrentInvoice
	}
}

// errConcurrentInvoice is transient: another transaction created the invoice
// between this one's look and its insert; the next try finds it.
var errConcurrentInvoice = errors.New("invoice created concurrently, try again")

func addLine(ctx context.Context, tx pgx.Tx, e *envelope.Envelope, period, currency, kind string, amount decimal.Decimal) (db.AddLineRow, error) {
	newID, err := uuid.NewV7()
	if err != nil {
		return db.AddLineRow{}, fmt.Errorf("new invoice id: %w", err)
	}
	row, err := db.New(tx).AddLine(ctx, db.AddLineParams{
		TenantID: e.TenantID, Period: period, Currency: currency, NewInvoiceID: newID,
		OriginEventID: e.EventID, Kind: kind, Amount: amount,
	})
	if err != nil {
		return db.AddLineRow{}, fmt.Errorf("add %s line of %s: %w", kind, e.EventID, err)
	}
	return row, nil
}

// correct turns an adjustment of an issued invoice into a correction note and
// its InvoiceCorrectionIssued, the invoice aggregate's next version. The
// issued invoice itself is not touched.
func (c *Consumer) correct(ctx context.Context, tx pgx.Tx, e *envelope.Envelope, p events.AdjustmentPosted, invoiceID uuid.UUID) error {
	q := db.New(tx)
	inv, err := q.LockIssuedInvoice(ctx, invoiceID)
	if err != nil {
		return fmt.Errorf("lock issued invoice %s: %w", invoiceID, err)
	}
	correctionID, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new correction id: %w", err)
	}
	now := c.now().UTC().Truncate(time.Microsecond)
	ev, err := envelope.New(c.meta(e, events.TypeInvoiceCorrectionIssued, invoiceID, inv.NextVersion, now),
		events.InvoiceCorrectionIssued{
			CorrectionID: correctionID, InvoiceID: invoiceID, OriginEventID: e.EventID,
			Period: p.Period, Currency: p.Currency, Amount: p.Amount, IssuedAt: now,
		})
	if err != nil {
		return fmt.Errorf("build InvoiceCorrectionIssued: %w", err)
	}
	n, err := q.AddCorrection(ctx, db.AddCorrectionParams{
		CorrectionID: correctionID, InvoiceID: invoiceID, OriginEventID: e.EventID, Amount: p.Amount,
		IssuedAt: now, Version: inv.NextVersion, EventID: ev.EventID,
	})
	if err != nil {
		return fmt.Errorf("add correction of %s: %w", e.EventID, err)
	}
	if n == 0 { // the adjustment is already a line of the invoice
		c.log.WarnContext(ctx, "adjustment already invoiced as a line", "event_id", e.EventID, "invoice_id", invoiceID)
		return nil
	}
	if err := outbox.Append(ctx, tx, events.TopicInvoice, ev); err != nil {
		return err
	}
	return nil
}

func (c *Consumer) onPeriodClosed(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
	p := d.Payload.(events.BillingPeriodClosed)
	e := &d.Envelope
	if err := checkPeriod(e, p.Period); err != nil {
		return inbox.Outcome{}, err
	}
	q := db.New(tx)
	// A second close of the same period is a unique violation here: the
	// inbox counts it as a duplicate (the period's invoices are issued).
	if err := q.RecordClose(ctx, db.RecordCloseParams{
		TenantID: e.TenantID, Period: p.Period, CloseEventID: e.EventID, ClosedAt: p.ClosedAt,
		Charges: p.Charges, Adjustments: p.Adjustments,
	}); err != nil {
		return inbox.Outcome{}, fmt.Errorf("record close of %s %s: %w", e.TenantID, p.Period, err)
	}
	rows, err := q.TallyInvoices(ctx, db.TallyInvoicesParams{TenantID: e.TenantID, Period: p.Period})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("tally invoices of %s %s: %w", e.TenantID, p.Period, err)
	}
	tallies := make([]domain.Tally, len(rows))
	for i, r := range rows {
		tallies[i] = domain.Tally{InvoiceID: r.InvoiceID, Currency: r.Currency, Issued: r.Status == domain.StatusIssued,
			Charges: r.Charges, Adjustments: r.Adjustments, Subtotal: r.Subtotal}
	}
	if err := c.checkClose(ctx, e, p, tallies); err != nil {
		return inbox.Outcome{}, err
	}

	now := c.now().UTC().Truncate(time.Microsecond)
	var issue []domain.Tally
	amounts := make(map[uuid.UUID]domain.Amounts)
	for _, t := range tallies {
		if t.Issued {
			continue
		}
		a, err := domain.Issue(t.Subtotal, t.Currency)
		if err != nil {
			return inbox.Outcome{}, inbox.Permanent("unknown_currency", err)
		}
		if !a.Rounding.IsZero() {
			if err := q.AddRoundingLine(ctx, db.AddRoundingLineParams{
				InvoiceID: t.InvoiceID, OriginEventID: e.EventID, Amount: a.Rounding,
			}); err != nil {
				return inbox.Outcome{}, fmt.Errorf("add rounding line to %s: %w", t.InvoiceID, err)
			}
		}
		issue = append(issue, t)
		amounts[t.InvoiceID] = a
	}
	if len(issue) == 0 {
		return inbox.Outcome{}, nil
	}
	ids := make([]uuid.UUID, len(issue))
	for i, t := range issue {
		ids[i] = t.InvoiceID
	}
	lineRows, err := q.ListLines(ctx, ids)
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("list lines of issued invoices: %w", err)
	}
	lines := make(map[uuid.UUID][]events.InvoiceLine, len(issue))
	for _, l := range lineRows {
		lines[l.InvoiceID] = append(lines[l.InvoiceID], events.InvoiceLine{OriginEventID: l.OriginEventID, Kind: l.Kind, Amount: l.Amount})
	}
	envs := make([]envelope.Envelope, 0, len(issue))
	for _, t := range issue {
		a := amounts[t.InvoiceID]
		ev, err := envelope.New(c.meta(e, events.TypeInvoiceIssued, t.InvoiceID, 1, now), events.InvoiceIssued{
			InvoiceID: t.InvoiceID, Period: p.Period, Currency: t.Currency, Lines: lines[t.InvoiceID],
			Subtotal: a.Subtotal, Total: a.Total, IssuedAt: now,
		})
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("build InvoiceIssued: %w", err)
		}
		n, err := q.IssueInvoice(ctx, db.IssueInvoiceParams{
			InvoiceID: t.InvoiceID, Subtotal: a.Subtotal, Total: a.Total, IssuedAt: now,
			CloseEventID: e.EventID, IssuedEventID: ev.EventID,
		})
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("issue invoice %s: %w", t.InvoiceID, err)
		}
		if n != 1 {
			return inbox.Outcome{}, fmt.Errorf("issue invoice %s: not open any more", t.InvoiceID)
		}
		envs = append(envs, ev)
	}
	if err := outbox.Append(ctx, tx, events.TopicInvoice, envs...); err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Outcome{}, nil
}

// checkClose maps the close rules' verdict to the inbox's: wait for missing
// lines, quarantine a close that can never match.
func (c *Consumer) checkClose(ctx context.Context, e *envelope.Envelope, p events.BillingPeriodClosed, tallies []domain.Tally) error {
	err := domain.CheckClose(domain.Close{Charges: p.Charges, Adjustments: p.Adjustments, Totals: p.Totals}, tallies)
	var incomplete *domain.IncompleteError
	var counts *domain.CountsMismatchError
	var totals *domain.TotalsMismatchError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &incomplete):
		c.log.WarnContext(ctx, "period close deferred: invoice lines missing", "event_id", e.EventID,
			"tenant_id", e.TenantID, "period", p.Period, "detail", err.Error())
		return inbox.DeferUntil(LinesKey(e.TenantID, p.Period))
	case errors.As(err, &counts):
		return inbox.Permanent(ReasonCloseCountsMismatch, err)
	case errors.As(err, &totals):
		return inbox.Permanent(ReasonCloseTotalsMismatch, err)
	default:
		return err
	}
}

// checkPeriod refuses an event whose payload's period is not its
// billing_period aggregate.
func checkPeriod(e *envelope.Envelope, period string) error {
	if e.AggregateType != events.AggregateBillingPeriod || e.AggregateID != period {
		return inbox.Permanent(ReasonPeriodMismatch, fmt.Errorf("event %s of aggregate %s/%s carries period %s",
			e.EventID, e.AggregateType, e.AggregateID, period))
	}
	return nil
}

// meta is the envelope metadata of an invoice event caused by consumed event e.
func (c *Consumer) meta(e *envelope.Envelope, eventType string, invoiceID uuid.UUID, version int64, at time.Time) envelope.Meta {
	correlation := e.CorrelationID
	if correlation == "" {
		correlation = e.EventID.String()
	}
	return envelope.Meta{
		EventType: eventType, SchemaVersion: 1, TenantID: e.TenantID,
		AggregateType: events.AggregateInvoice, AggregateID: invoiceID.String(), AggregateVersion: version,
		OccurredAt: at, Producer: Producer, CorrelationID: correlation, CausationID: e.EventID.String(),
		Traceparent: e.Traceparent,
	}
}
