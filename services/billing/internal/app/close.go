package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// CloseReply is the body of a period close.
type CloseReply struct {
	Period string `json:"period"`
	Status string `json:"status"`
}

// ClosePeriod closes a tenant's period, restartably and idempotently.
//
// Periods close in order (decision 0014): a close is refused (422
// earlier_period_open) while an earlier period of the tenant with charges
// or fees is not closed, and a period before one that is closing takes no
// more charges (its usage is late). Its BillingPeriodClosed names the
// tenant's previous closed period, so invoice issues, numbers and draws
// credits in period order whatever order the closes reach it in.
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
// With Config.WaitForUsage, step 1 waits for the usage accepted before the close
// was requested (decision 0014): the request is recorded first
// (close_requested_at, the first request's time and actor stand) and the
// period stays open; the call waits up to the service's close wait for
// usage's watermarks, then answers 202 {status: "closing"} without saving
// an answer under the key, and the scheduler finishes the close once usage
// has caught up (a retry with the key carries on, and answers closed once
// it is).
func (a *App) ClosePeriod(ctx context.Context, r Request, period string) (Reply, error) {
	return a.closePeriod(ctx, r, period, a.cfg.CloseWait)
}

func (a *App) closePeriod(ctx context.Context, r Request, period string, wait time.Duration) (Reply, error) {
	if err := r.checkActor(); err != nil {
		return Reply{}, err
	}
	current, err := a.CurrentPeriod(ctx, r.TenantID)
	if err != nil {
		return Reply{}, err
	}
	if err := domain.CheckBegun(period, current); err != nil {
		return Reply{}, err
	}
	// Refused at once while an earlier period is open; markClosing checks
	// again under the tenant's close lock.
	earliest, err := a.earliestUnclosed(ctx, a.pool, r.TenantID, period)
	if err != nil {
		return Reply{}, err
	}
	if err := domain.CheckEarlierClosed(period, earliest); err != nil {
		return Reply{}, err
	}
	if a.cfg.WaitForUsage {
		replay, ready, err := a.requestClose(ctx, r, period, wait)
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
	replay, err := a.markClosing(ctx, r, period)
	if err != nil || replay != nil {
		return derefReply(replay), err
	}
	return a.finishClose(ctx, r, period)
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
func (a *App) requestClose(ctx context.Context, r Request, period string, wait time.Duration) (*Reply, bool, error) {
	var replay *Reply
	var status string
	var requestedAt time.Time
	err := a.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if replay, err = idempotency.ClaimReply(ctx, tx, scope("close", r.TenantID), r.IdempotencyKey, r.RequestHash); err != nil || replay != nil {
			return err
		}
		q := db.New(tx)
		if err := q.LockPeriodExclusive(ctx, db.LockPeriodExclusiveParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		row, err := q.RequestClose(ctx, db.RequestCloseParams{TenantID: r.TenantID, Period: period,
			RequestedAt: a.now().UTC(), RequestedBy: r.Actor})
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
	cals, err := calendars(ctx, a.pool, r.TenantID)
	if err != nil {
		return nil, false, err
	}
	end := cals[r.TenantID].End(period)
	deadline := time.Now().Add(wait)
	for {
		ready, _, err := a.usageCaughtUp(ctx, a.pool, r.TenantID, end, requestedAt)
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
// changes nothing; a stored answer is returned as a replay. Under the
// tenant's close lock (no rating of the tenant in flight) it refuses while
// an earlier period is open. The key stays
// claimed without an answer until step 2 saves one; a retry after a crash
// finds it so and carries on.
func (a *App) markClosing(ctx context.Context, r Request, period string) (*Reply, error) {
	var replay *Reply
	err := a.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if replay, err = idempotency.ClaimReply(ctx, tx, scope("close", r.TenantID), r.IdempotencyKey, r.RequestHash); err != nil || replay != nil {
			return err
		}
		q := db.New(tx)
		if err := q.LockCloseStart(ctx, db.LockCloseStartParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		status, err := q.PeriodStatus(ctx, db.PeriodStatusParams{TenantID: r.TenantID, Period: period})
		if err != nil {
			return fmt.Errorf("read period %s: %w", period, err)
		}
		if status == domain.StatusOpen {
			earliest, err := a.earliestUnclosed(ctx, tx, r.TenantID, period)
			if err != nil {
				return err
			}
			if err := domain.CheckEarlierClosed(period, earliest); err != nil {
				return err
			}
		}
		if err := q.MarkPeriodClosing(ctx, db.MarkPeriodClosingParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("mark period %s closing: %w", period, err)
		}
		return nil
	})
	return replay, err
}

// finishClose is step 2.
func (a *App) finishClose(ctx context.Context, r Request, period string) (Reply, error) {
	var reply Reply
	err := a.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.LockPeriodExclusive(ctx, db.LockPeriodExclusiveParams{TenantID: r.TenantID, Period: period}); err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		status, err := q.LockPeriod(ctx, db.LockPeriodParams{TenantID: r.TenantID, Period: period})
		if err != nil {
			return fmt.Errorf("lock period %s: %w", period, err)
		}
		if status == domain.StatusClosing {
			if err := a.close(ctx, tx, q, r, period); err != nil {
				return err
			}
		} else if status != domain.StatusClosed {
			return fmt.Errorf("%w: period %s of %s is %s after it was marked closing", ErrInternal, period, r.TenantID, status)
		}
		reply, err = idempotency.SaveReply(ctx, tx, scope("close", r.TenantID), r.IdempotencyKey, http.StatusAccepted,
			CloseReply{Period: period, Status: domain.StatusClosed})
		return err
	})
	if err != nil {
		return Reply{}, err
	}
	return reply, nil
}

// close counts and closes a period the caller holds locked.
func (a *App) close(ctx context.Context, tx pgx.Tx, q *db.Queries, r Request, period string) error {
	rows, err := q.CloseTallies(ctx, db.CloseTalliesParams{TenantID: r.TenantID, Period: period})
	if err != nil {
		return fmt.Errorf("tally period %s: %w", period, err)
	}
	cals, err := calendars(ctx, tx, r.TenantID)
	if err != nil {
		return err
	}
	lines, err := q.PeriodLines(ctx, db.PeriodLinesParams{TenantID: r.TenantID, Period: period})
	if err != nil {
		return fmt.Errorf("read period lines: %w", err)
	}
	fees, err := periodFees(ctx, q, r.TenantID, period, cals[r.TenantID], lines)
	if err != nil {
		return err
	}
	closedAt := a.now().UTC().Truncate(time.Microsecond) // as PostgreSQL keeps it
	closed := events.BillingPeriodClosed{Period: period, ClosedAt: closedAt, Actor: r.Actor,
		Totals: map[string]decimal.Decimal{}, Currencies: map[string]events.CloseTally{}}
	if len(fees) > 0 {
		closed.Fees = fees
	}
	closed.TaxRates = cals[r.TenantID].Settings(period).TaxRates
	closed.PeriodEnd = cals[r.TenantID].End(period).UTC()
	if closed.PreviousPeriod, err = q.PreviousClosedPeriod(ctx, db.PreviousClosedPeriodParams{TenantID: r.TenantID, Period: period}); err != nil {
		return fmt.Errorf("find the period closed before %s: %w", period, err)
	}
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
