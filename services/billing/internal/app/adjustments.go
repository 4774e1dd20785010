package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// AdjustmentReply is the body of a posted adjustment.
type AdjustmentReply struct {
	AdjustmentID uuid.UUID `json:"adjustmentId"`
	EventID      uuid.UUID `json:"eventId"`
	Period       string    `json:"period"`
}

// PostAdjustment posts a correction of one of the tenant's charges in tx:
// it belongs to the charge's period, closed or not (AdjustmentPosted).
// Under the period's shared lock it reads the period's status: posted
// before the period closed, the close counts it and it is a line of the
// period's invoice; posted after, it is marked AfterClose and corrects the
// issued invoice. A credit is checked against the period's balance in its
// currency under the credit lock (App.checkCredit). A period holds at most
// Config.MaxAdjustments. A *domain.Error reports a broken rule; on an error
// the caller must not commit.
func (a *App) PostAdjustment(ctx context.Context, tx pgx.Tx, r Request, adj domain.Adjustment) (AdjustmentReply, error) {
	if err := r.checkActor(); err != nil {
		return AdjustmentReply{}, err
	}
	q := db.New(tx)
	charge, err := q.GetCharge(ctx, db.GetChargeParams{TenantID: r.TenantID, ChargeID: adj.CorrectionOf})
	if errors.Is(err, pgx.ErrNoRows) {
		return AdjustmentReply{}, domain.ChargeNotFound(adj.CorrectionOf)
	}
	if err != nil {
		return AdjustmentReply{}, fmt.Errorf("read charge %s: %w", adj.CorrectionOf, err)
	}
	if err := domain.CheckAdjustment(adj, charge.Currency); err != nil {
		return AdjustmentReply{}, err
	}
	if err := q.LockPeriodShared(ctx, db.LockPeriodSharedParams{TenantID: r.TenantID, Period: charge.Period}); err != nil {
		return AdjustmentReply{}, fmt.Errorf("lock period %s: %w", charge.Period, err)
	}
	if err := a.checkAdjustmentRoom(ctx, q, r.TenantID, charge.Period); err != nil {
		return AdjustmentReply{}, err
	}
	status, err := q.PeriodStatus(ctx, db.PeriodStatusParams{TenantID: r.TenantID, Period: charge.Period})
	if err != nil {
		return AdjustmentReply{}, fmt.Errorf("read period %s: %w", charge.Period, err)
	}
	if err := a.checkCredit(ctx, q, r.TenantID, charge.Period, adj); err != nil {
		return AdjustmentReply{}, err
	}
	afterClose := status == domain.StatusClosed
	adjustmentID, err := uuid.NewV7()
	if err != nil {
		return AdjustmentReply{}, fmt.Errorf("new adjustment id: %w", err)
	}
	env, err := events.New(events.AdjustmentPosted{
		AdjustmentID: adjustmentID, CorrectionOf: charge.ChargeID, Amount: adj.Amount, Currency: adj.Currency,
		Reason: adj.Reason, Period: charge.Period, AfterClose: afterClose, Actor: r.Actor,
	}, events.Meta{
		Producer: Producer, TenantID: r.TenantID, AggregateID: adjustmentID.String(), OccurredAt: a.now(),
		CorrelationID: r.CorrelationID,
	})
	if err != nil {
		return AdjustmentReply{}, err
	}
	err = q.InsertAdjustment(ctx, db.InsertAdjustmentParams{
		AdjustmentID: adjustmentID, EventID: env.EventID, TenantID: r.TenantID, CorrectionOf: charge.ChargeID,
		Amount: adj.Amount, Currency: adj.Currency, Reason: adj.Reason, Period: charge.Period, AfterClose: afterClose,
		Actor: r.Actor,
	})
	if err != nil {
		return AdjustmentReply{}, fmt.Errorf("insert adjustment: %w", err)
	}
	if err := events.Append(ctx, tx, env); err != nil {
		return AdjustmentReply{}, err
	}
	return AdjustmentReply{AdjustmentID: adjustmentID, EventID: env.EventID, Period: charge.Period}, nil
}

// checkAdjustmentRoom refuses an adjustment past Config.MaxAdjustments of
// the tenant's period, counted under the period's adjustment lock (held to
// the end of tx, so two adjustments at once cannot both take the last
// place).
func (a *App) checkAdjustmentRoom(ctx context.Context, q *db.Queries, tenantID, period string) error {
	if err := q.LockPeriodAdjustments(ctx, db.LockPeriodAdjustmentsParams{TenantID: tenantID, Period: period}); err != nil {
		return fmt.Errorf("lock adjustments of %s %s: %w", tenantID, period, err)
	}
	n, err := q.CountPeriodAdjustments(ctx, db.CountPeriodAdjustmentsParams{TenantID: tenantID, Period: period,
		RowLimit: int32(a.cfg.MaxAdjustments)})
	if err != nil {
		return fmt.Errorf("count adjustments of %s %s: %w", tenantID, period, err)
	}
	if n >= int64(a.cfg.MaxAdjustments) {
		return domain.AdjustmentLimitExceeded(tenantID, period, a.cfg.MaxAdjustments)
	}
	return nil
}
