// Package app is the query service's application layer: the inbox handler
// that projects every public event (a per-event row and a summary delta, in
// the deciding transaction), and the summary read that folds a tenant's
// pending deltas into its totals.
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

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// Topics are the public topics the query service projects.
var Topics = []string{events.TopicMeter, events.TopicUsage, events.TopicBilling, events.TopicInvoice}

// Projected are the event types projected (every public event type).
var Projected = []string{
	events.TypePriceActivated, events.TypeUsageAccepted, events.TypeChargeRated, events.TypeAdjustmentPosted,
	events.TypeBillingPeriodClosed, events.TypeInvoiceIssued, events.TypeInvoiceCorrectionIssued,
}

// Handlers maps every projected event type to the projecting handler.
func Handlers() map[string]inbox.Handler {
	hs := make(map[string]inbox.Handler, len(Projected))
	for _, t := range Projected {
		hs[t] = project
	}
	return hs
}

// project records the event and its summary delta in one statement. The inbox dedups by event id; a projection that
// exists anyway is a unique violation of projected_event_pkey, a duplicate.
func project(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
	e := &d.Envelope
	fact, delta, err := domain.Project(d.Payload)
	if err != nil {
		return inbox.Outcome{}, inbox.Permanent("unprojectable", err)
	}
	q := db.New(tx)
	if err := q.Project(ctx, db.ProjectParams{
		EventID: e.EventID, EventType: e.EventType, TenantID: e.TenantID, AggregateType: e.AggregateType,
		AggregateID: e.AggregateID, AggregateVersion: e.AggregateVersion, OccurredAt: e.OccurredAt,
		SubjectID: nullUUID(fact.SubjectID), OriginEventID: nullUUID(fact.OriginEventID),
		Period: nullText(fact.Period), MeterCode: nullText(fact.MeterCode), Currency: nullText(fact.Currency),
		Quantity: nullDecimal(fact.Quantity), UnitPrice: nullDecimal(fact.UnitPrice), Amount: nullDecimal(fact.Amount),
		Payload:   e.Payload,
		DeltaKind: delta.Kind, DeltaKey: delta.Key, DeltaAmount: delta.Amount,
	}); err != nil {
		return inbox.Outcome{}, fmt.Errorf("project %s %s: %w", e.EventType, e.EventID, err)
	}
	return inbox.Outcome{}, nil
}

func nullUUID(id uuid.UUID) uuid.NullUUID { return uuid.NullUUID{UUID: id, Valid: id != uuid.Nil} }

func nullText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

func nullDecimal(d *decimal.Decimal) decimal.NullDecimal {
	if d == nil {
		return decimal.NullDecimal{}
	}
	return decimal.NullDecimal{Decimal: *d, Valid: true}
}

// Reader reads tenant summaries.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader on pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// Summary folds the tenant's pending deltas into its totals and returns its
// summary; a tenant with no event has an all-zero summary. Folds of one
// tenant are serialised; consumers never wait for them.
func (r *Reader) Summary(ctx context.Context, tenantID string) (domain.Summary, error) {
	var out domain.Summary
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.LockTenantSummary(ctx, tenantID); err != nil {
			return fmt.Errorf("lock summary of %s: %w", tenantID, err)
		}
		if err := q.FoldDeltas(ctx, tenantID); err != nil {
			return fmt.Errorf("fold deltas of %s: %w", tenantID, err)
		}
		var lastEventAt *time.Time
		row, err := q.GetTenantSummary(ctx, tenantID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read summary of %s: %w", tenantID, err)
		default:
			at := row.LastEventAt.UTC()
			lastEventAt = &at
		}
		rows, err := q.ListTenantTotals(ctx, tenantID)
		if err != nil {
			return fmt.Errorf("read totals of %s: %w", tenantID, err)
		}
		totals := make([]domain.Total, len(rows))
		for i, t := range rows {
			totals[i] = domain.Total{Kind: t.Kind, Key: t.Key, Amount: t.Amount, Events: t.Events}
		}
		out = domain.Summarize(tenantID, totals, lastEventAt)
		return nil
	})
	return out, err
}
