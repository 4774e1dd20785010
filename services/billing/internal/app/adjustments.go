package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// AdjustmentReply is the body of a posted adjustment.
type AdjustmentReply struct {
	AdjustmentID uuid.UUID `json:"adjustmentId"`
	EventID      uuid.UUID `json:"eventId"`
	Period       string    `json:"period"`
}

// PostAdjustment posts a correction of one of the tenant's charges: it
// belongs to the charge's period, closed or not (AdjustmentPosted). Under the
// period's shared lock it reads the period's status: posted before the
// period closed, the close counts it and it is a line of the period's
// invoice; posted after, it is marked AfterClose and corrects the issued
// invoice. A credit is checked against the period's balance in its currency
// under the credit lock (checkCredit). A *domain.Error reports a broken rule
// (nothing written), ErrKeyReused a reused key.
func (a *App) PostAdjustment(ctx context.Context, r Request, adj domain.Adjustment) (Reply, error) {
	if err := r.checkActor(); err != nil {
		return Reply{}, err
	}
	var reply Reply
	err := a.inTx(ctx, func(tx pgx.Tx) error {
		sc := scope("adjustment", r.TenantID)
		replay, err := idempotency.ClaimReply(ctx, tx, sc, r.IdempotencyKey, r.RequestHash)
		if err != nil {
			return err
		}
		if replay != nil {
			reply = *replay
			return nil
		}
		q := db.New(tx)
		charge, err := q.GetCharge(ctx, db.GetChargeParams{TenantID: r.TenantID, ChargeID: adj.CorrectionOf})
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.ChargeNotFound(adj.CorrectionOf)
		}
		if err != nil {
			return fmt.Errorf("read charge %s: %w", adj.CorrectionOf, err)
		}
		if err := domain.CheckAdjustment(adj, charge.Currency); err != nil {
			return err
		}
		if err := q.LockPeriodShared(ctx, db.LockPeriodSharedParams{TenantID: r.TenantID, Period: charge.Period}); err != nil {
			return fmt.Errorf("lock period %s: %w", charge.Period, err)
		}
		status, err := q.PeriodStatus(ctx, db.PeriodStatusParams{TenantID: r.TenantID, Period: charge.Period})
		if err != nil {
			return fmt.Errorf("read period %s: %w", charge.Period, err)
		}
		if err := checkCredit(ctx, q, r.TenantID, charge.Period, adj); err != nil {
			return err
		}
		afterClose := status == domain.StatusClosed
		adjustmentID, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new adjustment id: %w", err)
		}
		env, err := events.New(events.AdjustmentPosted{
			AdjustmentID: adjustmentID, CorrectionOf: charge.ChargeID, Amount: adj.Amount, Currency: adj.Currency,
			Reason: adj.Reason, Period: charge.Period, AfterClose: afterClose, Actor: r.Actor,
		}, events.Meta{
			Producer: Producer, TenantID: r.TenantID, AggregateID: adjustmentID.String(), OccurredAt: a.now(),
			CorrelationID: r.CorrelationID,
		})
		if err != nil {
			return err
		}
		err = q.InsertAdjustment(ctx, db.InsertAdjustmentParams{
			AdjustmentID: adjustmentID, EventID: env.EventID, TenantID: r.TenantID, CorrectionOf: charge.ChargeID,
			Amount: adj.Amount, Currency: adj.Currency, Reason: adj.Reason, Period: charge.Period, AfterClose: afterClose,
			Actor: r.Actor,
		})
		if err != nil {
			return fmt.Errorf("insert adjustment: %w", err)
		}
		if err := events.Append(ctx, tx, env); err != nil {
			return err
		}
		reply, err = idempotency.SaveReply(ctx, tx, sc, r.IdempotencyKey, http.StatusCreated,
			AdjustmentReply{AdjustmentID: adjustmentID, EventID: env.EventID, Period: charge.Period})
		return err
	})
	if err != nil {
		return Reply{}, err
	}
	return reply, nil
}
