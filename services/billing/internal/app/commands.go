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
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// Reply is a command's response: what it answered the first time, or, on a
// replay of the same Idempotency-Key and request, the stored first answer.
type Reply = idempotency.Reply

// Request is what every idempotent command gets besides its own input.
type Request struct {
	TenantID string
	// IdempotencyKey is the client's key; RequestHash identifies the request
	// (idempotency.RequestHash of method, path and body).
	IdempotencyKey string
	RequestHash    string
	// CorrelationID is carried into the events; optional.
	CorrelationID string
	// Actor is who sent the command (the bearer token's subject), recorded
	// in the event and the row of every money-changing command; required.
	Actor string
}

// ErrNoActor is returned for a money-changing command without an actor:
// every one records who sent it.
var ErrNoActor = errors.New("command has no actor")

func (r Request) checkActor() error {
	if r.Actor == "" {
		return ErrNoActor
	}
	return nil
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
// belongs to the charge's period, closed or not (AdjustmentPosted). Under the
// period's shared lock it reads the period's status: posted before the
// period closed, the close counts it and it is a line of the period's
// invoice; posted after, it is marked AfterClose and corrects the issued
// invoice. A credit is checked against the period's balance in its currency
// under the credit lock (checkCredit). A *domain.Error reports a broken rule
// (nothing written), ErrKeyReused a reused key.
func (s *Service) PostAdjustment(ctx context.Context, r Request, a domain.Adjustment) (Reply, error) {
	if err := r.checkActor(); err != nil {
		return Reply{}, err
	}
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
		if err := q.LockPeriodShared(ctx, db.LockPeriodSharedParams{TenantID: r.TenantID, Period: charge.Period}); err != nil {
			return fmt.Errorf("lock period %s: %w", charge.Period, err)
		}
		status, err := q.PeriodStatus(ctx, db.PeriodStatusParams{TenantID: r.TenantID, Period: charge.Period})
		if err != nil {
			return fmt.Errorf("read period %s: %w", charge.Period, err)
		}
		if err := checkCredit(ctx, q, r.TenantID, charge.Period, a); err != nil {
			return err
		}
		afterClose := status == domain.StatusClosed
		adjustmentID, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new adjustment id: %w", err)
		}
		env, err := events.New(events.AdjustmentPosted{
			AdjustmentID: adjustmentID, CorrectionOf: charge.ChargeID, Amount: a.Amount, Currency: a.Currency,
			Reason: a.Reason, Period: charge.Period, AfterClose: afterClose, Actor: r.Actor,
		}, events.Meta{
			Producer: Producer, TenantID: r.TenantID, AggregateID: adjustmentID.String(), OccurredAt: s.now(),
			CorrelationID: r.CorrelationID,
		})
		if err != nil {
			return err
		}
		err = q.InsertAdjustment(ctx, db.InsertAdjustmentParams{
			AdjustmentID: adjustmentID, EventID: env.EventID, TenantID: r.TenantID, CorrectionOf: charge.ChargeID,
			Amount: a.Amount, Currency: a.Currency, Reason: a.Reason, Period: charge.Period, AfterClose: afterClose,
			Actor: r.Actor,
		})
		if err != nil {
			return fmt.Errorf("insert adjustment: %w", err)
		}
		if err := events.Append(ctx, tx, env); err != nil {
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
// Step 1 (its own transaction) takes the period's advisory lock exclusively,
// so the rating transactions that hold it shared have committed, and marks
// the period closing: from its commit on, usage of the period is rated late
// into a later period. Step 2, in one transaction under the same exclusive
// lock, counts, sums and digests the period's charges and adjustments per
// currency (what invoice must find before it issues), marks the period
// closed and appends BillingPeriodClosed. No event of the period is ordered
// before the close: invoice proves its copy complete from the tallies. A
// crash between the steps leaves the period closing and the next call
// finishes it (its actor is the one recorded); a call on a closed period
// publishes nothing.
//
// With WaitForUsage, step 1 waits for the usage accepted before the close
// was requested (decision 0014): the request is recorded first
// (close_requested_at, the first request's time and actor stand) and the
// period stays open; the call waits up to the service's close wait for
// usage's watermarks, then answers 202 {status: "closing"} without saving
// an answer under the key, and the scheduler finishes the close once usage
// has caught up (a retry with the key carries on, and answers closed once
// it is).
func (s *Service) ClosePeriod(ctx context.Context, r Request, period string) (Reply, error) {
	return s.closePeriod(ctx, r, period, s.closeWait)
}

func (s *Service) closePeriod(ctx context.Context, r Request, period string, wait time.Duration) (Reply, error) {
	if err := r.checkActor(); err != nil {
		return Reply{}, err
	}
	current, err := s.CurrentPeriod(ctx, r.TenantID)
	if err != nil {
		return Reply{}, err
	}
	if err := domain.CheckBegun(period, current); err != nil {
		return Reply{}, err
	}
	if s.gate {
		replay, ready, err := s.requestClose(ctx, r, period, wait)
		if err != nil || replay != nil {
			return derefReply(replay), err
		}
		if !ready {
			body, err := json.Marshal(CloseReply{Period: period, Status: domain.StatusClosing})
			if err != nil {
				return Reply{}, fmt.Errorf("encode reply: %w", err)
			}
			return Reply{Status: http.StatusAccepted, Body: body}, nil
		}
	}
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

// closePoll is how often a waiting close looks at usage's watermarks again.
const closePoll = 50 * time.Millisecond

// requestClose records the close request (claiming the key first, so a
// reused key changes nothing and an answered one replays) and waits up to
// wait for usage to catch up with it: ready when step 1 may run (or the
// period is closing or closed already).
func (s *Service) requestClose(ctx context.Context, r Request, period string, wait time.Duration) (*Reply, bool, error) {
	var replay *Reply
	var status string
	var requestedAt time.Time
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		prev, err := idempotency.Claim(ctx, tx, scope("close", r.TenantID), r.IdempotencyKey, r.RequestHash)
		if err != nil {
			return err
		}
		if prev != nil && prev.Status != 0 {
			replay = &Reply{Status: prev.Status, Body: prev.Body, Replayed: true}
			return nil
		}
		q := db.New(tx)
		if err := q.LockPeriodExclusive(ctx, db.LockPeriodExclusiveParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		row, err := q.RequestClose(ctx, db.RequestCloseParams{TenantID: r.TenantID, Period: period,
			RequestedAt: s.now().UTC(), RequestedBy: r.Actor})
		if err != nil {
			return fmt.Errorf("request close of %s: %w", period, err)
		}
		status, requestedAt = row.Status, row.CloseRequestedAt
		return nil
	})
	if err != nil || replay != nil {
		return replay, false, err
	}
	if status != domain.StatusOpen {
		return nil, true, nil
	}
	cals, err := calendars(ctx, s.pool, r.TenantID)
	if err != nil {
		return nil, false, err
	}
	end := cals[r.TenantID].End(period)
	deadline := time.Now().Add(wait)
	for {
		ready, _, err := s.usageCaughtUp(ctx, s.pool, r.TenantID, end, requestedAt)
		if err != nil || ready || !time.Now().Add(closePoll).Before(deadline) {
			return nil, ready, err
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(closePoll):
		}
	}
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
		q := db.New(tx)
		if err := q.LockPeriodExclusive(ctx, db.LockPeriodExclusiveParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		if err := q.MarkPeriodClosing(ctx, db.MarkPeriodClosingParams{TenantID: r.TenantID, Period: period}); err != nil {
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
		if err := q.LockPeriodExclusive(ctx, db.LockPeriodExclusiveParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		status, err := q.LockPeriod(ctx, db.LockPeriodParams{TenantID: r.TenantID, Period: period})
		if err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		if status == domain.StatusClosing {
			if err := s.close(ctx, tx, q, r, period); err != nil {
				return err
			}
		} else if status != domain.StatusClosed {
			return fmt.Errorf("%w: period %s of %s is %s after it was marked closing", ErrInternal, period, r.TenantID, status)
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

// close counts and closes a period the caller holds locked.
func (s *Service) close(ctx context.Context, tx pgx.Tx, q *db.Queries, r Request, period string) error {
	rows, err := q.CloseTallies(ctx, db.CloseTalliesParams{TenantID: r.TenantID, Period: period})
	if err != nil {
		return fmt.Errorf("tally period %s: %w", period, err)
	}
	closedAt := s.now().UTC().Truncate(time.Microsecond) // as PostgreSQL keeps it
	closed := events.BillingPeriodClosed{Period: period, ClosedAt: closedAt, Actor: r.Actor,
		Totals: map[string]decimal.Decimal{}, Currencies: map[string]events.CloseTally{}}
	for _, row := range rows {
		closed.Charges += row.Charges
		closed.Adjustments += row.Adjustments
		closed.Totals[row.Currency] = row.ChargeAmount.Add(row.AdjustmentAmount)
		closed.Currencies[row.Currency] = events.CloseTally{
			Charges: row.Charges, ChargeAmount: row.ChargeAmount, ChargeDigest: row.ChargeDigest,
			Adjustments: row.Adjustments, AdjustmentAmount: row.AdjustmentAmount, AdjustmentDigest: row.AdjustmentDigest,
		}
	}
	env, err := events.New(closed, events.Meta{
		Producer: Producer, TenantID: r.TenantID, AggregateID: period, OccurredAt: closedAt, CorrelationID: r.CorrelationID,
	})
	if err != nil {
		return err
	}
	n, err := q.MarkPeriodClosed(ctx, db.MarkPeriodClosedParams{
		ClosedAt: closedAt, CloseEventID: env.EventID, TenantID: r.TenantID, Period: period, ClosedBy: r.Actor,
	})
	if err != nil {
		return fmt.Errorf("mark period %s closed: %w", period, err)
	}
	if n != 1 {
		return fmt.Errorf("%w: period %s of %s was not closing under its lock", ErrInternal, period, r.TenantID)
	}
	return events.Append(ctx, tx, env)
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
	// Model is the price version's pricing model; under another than unit
	// the charge shows no unitPrice and no amount (MarshalJSON).
	Model string `json:"model"`
}

// ChargeFilter selects the charges of a list: a period, optionally one meter
// and one of its price versions (the charges behind one invoice line).
type ChargeFilter struct {
	Period       string
	MeterCode    string // "" for every meter
	PriceVersion int64  // 0 for every version; needs MeterCode
}

// ChargePosition is the keyset position of a charge in line order: the
// cursor of a charges page.
type ChargePosition struct {
	MeterCode    string    `json:"m"`
	Currency     string    `json:"c"`
	PriceVersion int64     `json:"v"`
	ChargeID     uuid.UUID `json:"id"`
}

// Position is the charge's keyset position.
func (c Charge) Position() ChargePosition {
	return ChargePosition{MeterCode: c.MeterCode, Currency: c.Currency, PriceVersion: c.PriceVersion, ChargeID: c.ChargeID}
}

// ListCharges returns up to limit charges of a tenant matching f, in line
// order (meter, currency, price version, charge id) after position after
// (the zero position for the first page).
func (s *Service) ListCharges(ctx context.Context, tenantID string, f ChargeFilter, after ChargePosition, limit int32) ([]Charge, error) {
	q := db.New(s.pool)
	var out []Charge
	add := func(c db.ListChargesRow) {
		out = append(out, Charge{
			ChargeID: c.ChargeID, EventID: c.EventID, UsageEventID: c.UsageEventID, UsageID: c.UsageID,
			MeterCode: c.MeterCode, Currency: c.Currency, Quantity: c.Quantity, UnitPrice: c.UnitPrice,
			PriceVersion: c.PriceVersion, Amount: c.Amount, Period: c.Period, Late: c.Late, OccurredAt: c.OccurredAt.UTC(),
			Model: c.Model,
		})
	}
	if f.MeterCode == "" {
		rows, err := q.ListCharges(ctx, db.ListChargesParams{TenantID: tenantID, Period: f.Period,
			AfterMeter: after.MeterCode, AfterCurrency: after.Currency, AfterVersion: after.PriceVersion,
			AfterCharge: after.ChargeID, RowLimit: limit})
		if err != nil {
			return nil, fmt.Errorf("list charges: %w", err)
		}
		for _, c := range rows {
			add(c)
		}
		return out, nil
	}
	if after.MeterCode != f.MeterCode { // the first page
		after = ChargePosition{MeterCode: f.MeterCode}
	}
	version := pgtype.Int8{Int64: f.PriceVersion, Valid: f.PriceVersion > 0}
	rows, err := q.ListMeterCharges(ctx, db.ListMeterChargesParams{TenantID: tenantID, Period: f.Period,
		MeterCode: f.MeterCode, PriceVersion: version, AfterCurrency: after.Currency, AfterVersion: after.PriceVersion,
		AfterCharge: after.ChargeID, RowLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("list charges: %w", err)
	}
	for _, c := range rows {
		add(db.ListChargesRow(c))
	}
	return out, nil
}
