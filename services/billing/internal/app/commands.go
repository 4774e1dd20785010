package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// Reply is a command's response: what it answered the first time, or, on a
// replay of the same Idempotency-Key and request, the stored first answer.
type Reply struct {
	Status   int
	Body     []byte
	Replayed bool
}

// Request is what every idempotent command gets besides its own input.
type Request struct {
	TenantID string
	// IdempotencyKey is the client's key; RequestHash identifies the request
	// (idempotency.RequestHash of method, path and body).
	IdempotencyKey string
	RequestHash    string
	// CorrelationID is carried into the events; optional.
	CorrelationID string
}

// ErrKeyReused is returned when the Idempotency-Key came with another request.
var ErrKeyReused = idempotency.ErrKeyReused

func scope(command, tenantID string) string { return "billing." + command + "/" + tenantID }

// AdjustmentReply is the body of a posted adjustment.
type AdjustmentReply struct {
	AdjustmentID uuid.UUID `json:"adjustmentId"`
	EventID      uuid.UUID `json:"eventId"`
	Period       string    `json:"period"`
}

// PostAdjustment posts a correction of one of the tenant's charges: it
// belongs to the charge's period, closed or not, and is the next version of
// that period's aggregate (AdjustmentPosted). A *domain.Error reports a
// broken rule (nothing written), ErrKeyReused a reused key.
func (s *Service) PostAdjustment(ctx context.Context, r Request, a domain.Adjustment) (Reply, error) {
	var reply Reply
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		sc := scope("adjustment", r.TenantID)
		prev, err := idempotency.Claim(ctx, tx, sc, r.IdempotencyKey, r.RequestHash)
		if err != nil {
			return err
		}
		if prev != nil && prev.Status != 0 {
			reply = Reply{Status: prev.Status, Body: prev.Body, Replayed: true}
			return nil
		}
		q := db.New(tx)
		charge, err := q.GetCharge(ctx, db.GetChargeParams{TenantID: r.TenantID, ChargeID: a.CorrectionOf})
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.ChargeNotFound(a.CorrectionOf)
		}
		if err != nil {
			return fmt.Errorf("read charge %s: %w", a.CorrectionOf, err)
		}
		if err := domain.CheckAdjustment(a, charge.Currency); err != nil {
			return err
		}
		version, err := q.NextPeriodVersion(ctx, db.NextPeriodVersionParams{TenantID: r.TenantID, Period: charge.Period})
		if err != nil {
			return fmt.Errorf("lock period %s: %w", charge.Period, err)
		}
		adjustmentID, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new adjustment id: %w", err)
		}
		env, err := newEvent(events.TypeAdjustmentPosted, r.TenantID, charge.Period, version, s.now(), r.CorrelationID, "",
			events.AdjustmentPosted{
				AdjustmentID: adjustmentID, CorrectionOf: charge.ChargeID, Amount: a.Amount, Currency: a.Currency,
				Reason: a.Reason, Period: charge.Period,
			})
		if err != nil {
			return err
		}
		err = q.InsertAdjustment(ctx, db.InsertAdjustmentParams{
			AdjustmentID: adjustmentID, EventID: env.EventID, TenantID: r.TenantID, CorrectionOf: charge.ChargeID,
			Amount: a.Amount, Currency: a.Currency, Reason: a.Reason, Period: charge.Period, AggregateVersion: version,
		})
		if err != nil {
			return fmt.Errorf("insert adjustment: %w", err)
		}
		if err := outbox.Append(ctx, tx, events.TopicBilling, env); err != nil {
			return err
		}
		body, err := json.Marshal(AdjustmentReply{AdjustmentID: adjustmentID, EventID: env.EventID, Period: charge.Period})
		if err != nil {
			return fmt.Errorf("encode reply: %w", err)
		}
		reply = Reply{Status: http.StatusCreated, Body: body}
		return idempotency.Save(ctx, tx, sc, r.IdempotencyKey, reply.Status, body)
	})
	if err != nil {
		return Reply{}, err
	}
	return reply, nil
}

// CloseReply is the body of a period close.
type CloseReply struct {
	Period string `json:"period"`
	Status string `json:"status"`
}

// ClosePeriod closes a tenant's period, restartably and idempotently.
//
// Step 1 (its own transaction) marks the period closing: from its commit on,
// usage of the period is rated late into a later period, and the rating
// transactions that took charges into it before have committed (they held
// its row lock). Step 2, in one transaction under the period's row lock,
// counts the period's charges and adjustments, totals them per currency,
// marks the period closed and appends BillingPeriodClosed as the next
// version of the period's aggregate, so the close's version is one past every
// event it counts. A crash between the steps leaves the period closing and
// the next call finishes it; a call on a closed period publishes nothing.
func (s *Service) ClosePeriod(ctx context.Context, r Request, period string) (Reply, error) {
	replay, err := s.markClosing(ctx, r, period)
	if err != nil || replay != nil {
		return derefReply(replay), err
	}
	return s.finishClose(ctx, r, period)
}

func derefReply(r *Reply) Reply {
	if r == nil {
		return Reply{}
	}
	return *r
}

// markClosing is step 1. It claims the Idempotency-Key first, so a reused key
// changes nothing; a stored answer is returned as a replay. The key stays
// claimed without an answer until step 2 saves one; a retry after a crash
// finds it so and carries on.
func (s *Service) markClosing(ctx context.Context, r Request, period string) (*Reply, error) {
	var replay *Reply
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		prev, err := idempotency.Claim(ctx, tx, scope("close", r.TenantID), r.IdempotencyKey, r.RequestHash)
		if err != nil {
			return err
		}
		if prev != nil && prev.Status != 0 {
			replay = &Reply{Status: prev.Status, Body: prev.Body, Replayed: true}
			return nil
		}
		if err := db.New(tx).MarkPeriodClosing(ctx, db.MarkPeriodClosingParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("mark period %s closing: %w", period, err)
		}
		return nil
	})
	return replay, err
}

// finishClose is step 2.
func (s *Service) finishClose(ctx context.Context, r Request, period string) (Reply, error) {
	var reply Reply
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		bp, err := q.LockPeriod(ctx, db.LockPeriodParams{TenantID: r.TenantID, Period: period})
		if err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		if bp.Status == domain.StatusClosing {
			if err := s.close(ctx, tx, q, r, period, bp.Version); err != nil {
				return err
			}
		} else if bp.Status != domain.StatusClosed {
			return fmt.Errorf("%w: period %s of %s is %s after it was marked closing", ErrInternal, period, r.TenantID, bp.Status)
		}
		body, err := json.Marshal(CloseReply{Period: period, Status: domain.StatusClosed})
		if err != nil {
			return fmt.Errorf("encode reply: %w", err)
		}
		reply = Reply{Status: http.StatusAccepted, Body: body}
		return idempotency.Save(ctx, tx, scope("close", r.TenantID), r.IdempotencyKey, reply.Status, body)
	})
	if err != nil {
		return Reply{}, err
	}
	return reply, nil
}

// close counts and closes a period the caller holds locked at version.
func (s *Service) close(ctx context.Context, tx pgx.Tx, q *db.Queries, r Request, period string, version int64) error {
	rows, err := q.PeriodTotals(ctx, db.PeriodTotalsParams{TenantID: r.TenantID, Period: period})
	if err != nil {
		return fmt.Errorf("total period %s: %w", period, err)
	}
	totals := make([]domain.PeriodTotal, len(rows))
	for i, row := range rows {
		totals[i] = domain.PeriodTotal{Currency: row.Currency, Charges: row.Charges, Adjustments: row.Adjustments, Total: row.Total}
	}
	sum := domain.Summarize(totals)
	// Every event of the aggregate so far is one of the charges and
	// adjustments counted: the close is version N = counted + 1.
	if sum.Charges+sum.Adjustments != version {
		return fmt.Errorf("%w: period %s of %s is at version %d but holds %d charges and %d adjustments",
			ErrInternal, period, r.TenantID, version, sum.Charges, sum.Adjustments)
	}
	closedAt := s.now().UTC().Truncate(time.Microsecond) // as PostgreSQL keeps it
	if sum.Totals == nil {
		sum.Totals = map[string]decimal.Decimal{}
	}
	env, err := newEvent(events.TypeBillingPeriodClosed, r.TenantID, period, version+1, closedAt, r.CorrelationID, "",
		events.BillingPeriodClosed{
			Period: period, ClosedAt: closedAt, Charges: sum.Charges, Adjustments: sum.Adjustments, Totals: sum.Totals,
		})
	if err != nil {
		return err
	}
	n, err := q.MarkPeriodClosed(ctx, db.MarkPeriodClosedParams{
		ClosedAt: closedAt, Version: version + 1, CloseEventID: env.EventID, TenantID: r.TenantID, Period: period,
	})
	if err != nil {
		return fmt.Errorf("mark period %s closed: %w", period, err)
	}
	if n != 1 {
		return fmt.Errorf("%w: period %s of %s was not closing under its lock", ErrInternal, period, r.TenantID)
	}
	return outbox.Append(ctx, tx, events.TopicBilling, env)
}

// Charge is a charge as the API shows it.
type Charge struct {
	ChargeID     uuid.UUID       `json:"chargeId"`
	EventID      uuid.UUID       `json:"eventId"`
	UsageEventID uuid.UUID       `json:"usageEventId"`
	UsageID      uuid.UUID       `json:"usageId"`
	MeterCode    string          `json:"meterCode"`
	Currency     string          `json:"currency"`
	Quantity     decimal.Decimal `json:"quantity"`
	UnitPrice    decimal.Decimal `json:"unitPrice"`
	PriceVersion int64           `json:"priceVersion"`
	Amount       decimal.Decimal `json:"amount"`
	Period       string          `json:"period"`
	Late         bool            `json:"late"`
	OccurredAt   time.Time       `json:"occurredAt"`
	Version      int64           `json:"aggregateVersion"`
}

// ListCharges returns the charges rated into a tenant's period, in aggregate
// version order.
func (s *Service) ListCharges(ctx context.Context, tenantID, period string) ([]Charge, error) {
	rows, err := db.New(s.pool).ListCharges(ctx, db.ListChargesParams{TenantID: tenantID, Period: period})
	if err != nil {
		return nil, fmt.Errorf("list charges: %w", err)
	}
	out := make([]Charge, len(rows))
	for i, c := range rows {
		out[i] = Charge{
			ChargeID: c.ChargeID, EventID: c.EventID, UsageEventID: c.UsageEventID, UsageID: c.UsageID,
			MeterCode: c.MeterCode, Currency: c.Currency, Quantity: c.Quantity, UnitPrice: c.UnitPrice,
			PriceVersion: c.PriceVersion, Amount: c.Amount, Period: c.Period, Late: c.Late,
			OccurredAt: c.OccurredAt.UTC(), Version: c.AggregateVersion,
		}
	}
	return out, nil
}
