package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
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
// Periods close in order (decision 0014): a close is refused
// (earlier_period_open) while an earlier period of the tenant with charges
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
// usage's watermarks, then returns closing without saving an answer under
// the key, and the scheduler finishes the close once usage
// has caught up (a retry with the key carries on, and answers closed once
// it is).
//
// The caller's key (Key) is claimed by step 1 (and by the request, when
// the close waits) and answered by step 2 with the closed CloseReply. A
// key with an answer means the close ran to its end before: it does
// nothing more and returns closed. A key with another request is
// idempotency.ErrKeyReused; a refused close (earlier_period_open) writes
// nothing, the key included.
func (a *App) ClosePeriod(ctx context.Context, r Request, period string, key Key) (CloseReply, error) {
	return a.closePeriod(ctx, r, period, key, a.cfg.CloseWait)
}

func (a *App) closePeriod(ctx context.Context, r Request, period string, key Key, wait time.Duration) (CloseReply, error) {
	if err := r.checkActor(); err != nil {
		return CloseReply{}, err
	}
	current, err := a.CurrentPeriod(ctx, r.TenantID)
	if err != nil {
		return CloseReply{}, err
	}
	if err := domain.CheckBegun(period, current); err != nil {
		return CloseReply{}, err
	}
	// Refused at once while an earlier period is open; markClosing checks
	// again under the tenant's close lock.
	earliest, err := a.earliestUnclosed(ctx, a.pool, r.TenantID, period)
	if err != nil {
		return CloseReply{}, err
	}
	if err := domain.CheckEarlierClosed(period, earliest); err != nil {
		return CloseReply{}, err
	}
	closed := CloseReply{Period: period, Status: domain.StatusClosed}
	if a.cfg.WaitForUsage {
		answered, ready, err := a.requestClose(ctx, r, period, key, wait)
		if err != nil {
			return CloseReply{}, err
		}
		if answered {
			return closed, nil
		}
		if !ready {
			return CloseReply{Period: period, Status: domain.StatusClosing}, nil
		}
	}
	answered, err := a.markClosing(ctx, r, period, key)
	if err != nil {
		return CloseReply{}, err
	}
	if answered {
		return closed, nil
	}
	if err := a.finishClose(ctx, r, period, key, closed); err != nil {
		return CloseReply{}, err
	}
	if err := a.purgeTally(ctx, r.TenantID, period); err != nil {
		// The close is done; the scheduler's next pass purges the rest.
		a.log.WarnContext(ctx, "purge the tally of a closed period", "tenant_id", r.TenantID, "period", period, "err", err)
	}
	return closed, nil
}

// closePoll is how often a waiting close looks at usage's watermarks again.
const closePoll = 50 * time.Millisecond

// requestClose records the close request (claiming the key first, so a
// reused key changes nothing; answered when the key has an answer) and
// waits up to wait for usage to catch up with it: ready when step 1 may run
// (or the period is closing or closed already).
func (a *App) requestClose(ctx context.Context, r Request, period string, key Key, wait time.Duration) (answered, ready bool, err error) {
	var status string
	var requestedAt time.Time
	err = a.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if answered, err = key.Claim(ctx, tx); err != nil || answered {
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
	if err != nil || answered {
		return answered, false, err
	}
	if status != domain.StatusOpen {
		return false, true, nil
	}
	cals, err := calendars(ctx, a.pool, r.TenantID)
	if err != nil {
		return false, false, err
	}
	end := cals[r.TenantID].End(period)
	deadline := time.Now().Add(wait)
	for {
		ready, _, err := a.usageCaughtUp(ctx, a.pool, r.TenantID, end, requestedAt)
		if err != nil || ready || !time.Now().Add(closePoll).Before(deadline) {
			return false, ready, err
		}
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-time.After(closePoll):
		}
	}
}

// markClosing is step 1. It claims the key first, so a reused key changes
// nothing; answered when the key has an answer. Under the tenant's close
// lock (no rating of the tenant in flight) it refuses while an earlier
// period is open. The key stays claimed without an answer until step 2
// saves one; a retry after a crash finds it so and carries on.
func (a *App) markClosing(ctx context.Context, r Request, period string, key Key) (answered bool, err error) {
	err = a.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if answered, err = key.Claim(ctx, tx); err != nil || answered {
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
	return answered, err
}

// finishClose is step 2: it tallies the period's charges chunk by chunk,
// then closes the period (if a concurrent close has not) and saves closed
// as the key's answer.
func (a *App) finishClose(ctx context.Context, r Request, period string, key Key, closed CloseReply) error {
	if err := a.tallyChunks(ctx, r.TenantID, period); err != nil {
		return err
	}
	return a.inTx(ctx, func(tx pgx.Tx) error {
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
		return key.Save(ctx, tx, closed)
	})
}

// tallyChunks walks a closing period's charges in chunks of
// Config.CloseChunk, each its own transaction under the period's exclusive
// lock: it reads the next chunk after the recorded position (keyset order
// of usage_event_id, ChargeChunkLines), adds it to the running tally of
// the period's lines (periodTally.add: close_line, close_value) and records the new position in the same
// transaction, so a crash loses at most the chunk in flight and a retry,
// or a concurrent closer, carries on from the last commit. Step 1 made the
// set final: a closing period takes no charge and charges are immutable,
// so the walk counts each charge once. It returns once the walk is done or
// the period is no longer closing (a concurrent close finished it).
func (a *App) tallyChunks(ctx context.Context, tenantID, period string) error {
	for {
		var done bool
		err := a.inTx(ctx, func(tx pgx.Tx) error {
			q := db.New(tx)
			if err := q.LockPeriodExclusive(ctx, db.LockPeriodExclusiveParams{TenantID: tenantID, Period: period}); err != nil {
				return fmt.Errorf("lock period %s: %w", period, err)
			}
			status, err := q.LockPeriod(ctx, db.LockPeriodParams{TenantID: tenantID, Period: period})
			if err != nil {
				return fmt.Errorf("lock period %s: %w", period, err)
			}
			if status != domain.StatusClosing {
				done = true
				return nil
			}
			if err := q.StartCloseProgress(ctx, db.StartCloseProgressParams{TenantID: tenantID, Period: period}); err != nil {
				return fmt.Errorf("start the tally of %s: %w", period, err)
			}
			p, err := q.CloseProgress(ctx, db.CloseProgressParams{TenantID: tenantID, Period: period})
			if err != nil {
				return fmt.Errorf("read the tally of %s: %w", period, err)
			}
			if p.Done {
				done = true
				return nil
			}
			rows, err := q.ChargeChunkLines(ctx, db.ChargeChunkLinesParams{
				TenantID: tenantID, Period: period, After: p.After, ChunkSize: int32(a.cfg.CloseChunk)})
			if err != nil {
				return fmt.Errorf("tally chunk %d of %s (%d charges so far): %w", p.Chunks+1, period, p.Charges, err)
			}
			charges, last := int64(0), p.After
			if len(rows) > 0 {
				charges, last = rows[0].ChunkCharges, rows[0].ChunkLast
				t, err := loadCloseTally(ctx, q, tenantID, period)
				if err != nil {
					return err
				}
				if err := t.add(ctx, rows, closeValues(q, tenantID, period)); err != nil {
					return fmt.Errorf("tally chunk %d of %s: %w", p.Chunks+1, period, err)
				}
				if err := saveCloseTally(ctx, q, tenantID, period, t); err != nil {
					return err
				}
			}
			done = charges < int64(a.cfg.CloseChunk)
			if err := q.AdvanceCloseProgress(ctx, db.AdvanceCloseProgressParams{
				TenantID: tenantID, Period: period, After: last, Charges: charges, Done: done}); err != nil {
				return fmt.Errorf("record chunk %d of %s: %w", p.Chunks+1, period, err)
			}
			if a.afterChunk != nil {
				return a.afterChunk(p.Chunks + 1)
			}
			return nil
		})
		if err != nil || done {
			return err
		}
	}
}

// close counts and closes a period the caller holds locked, from the
// running tally tallyChunks completed: O(lines) rows, whatever the number
// of charges.
func (a *App) close(ctx context.Context, tx pgx.Tx, q *db.Queries, r Request, period string) error {
	p, err := q.CloseProgress(ctx, db.CloseProgressParams{TenantID: r.TenantID, Period: period})
	if err != nil {
		return fmt.Errorf("read the tally of %s: %w", period, err)
	}
	if !p.Done {
		return fmt.Errorf("%w: period %s of %s closes before its charges were tallied", ErrInternal, period, r.TenantID)
	}
	rows, err := q.ClosingTallies(ctx, db.ClosingTalliesParams{TenantID: r.TenantID, Period: period})
	if err != nil {
		return fmt.Errorf("tally period %s: %w", period, err)
	}
	cals, err := calendars(ctx, tx, r.TenantID)
	if err != nil {
		return err
	}
	tally, err := loadCloseTally(ctx, q, r.TenantID, period)
	if err != nil {
		return err
	}
	lines := tally.lines()
	if err := priceLines(ctx, q, r.TenantID, lines); err != nil {
		return err
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

// purgeTally deletes a closed period's close_value rows and its lines'
// value sets (charge_line_value), CloseChunk at a time (each its own
// statement), then its close_progress row; its close_line and
// charge_line_part rows stay (O(lines)).
func (a *App) purgeTally(ctx context.Context, tenantID, period string) error {
	q := db.New(a.pool)
	limit := int32(a.cfg.CloseChunk)
	if err := untilFewer(limit, func() (int64, error) {
		return q.PurgeCloseValues(ctx, db.PurgeCloseValuesParams{TenantID: tenantID, Period: period, RowLimit: limit})
	}); err != nil {
		return fmt.Errorf("purge the values tallied for %s: %w", period, err)
	}
	if err := untilFewer(limit, func() (int64, error) {
		return q.PurgeLineValues(ctx, db.PurgeLineValuesParams{TenantID: tenantID, Period: period, RowLimit: limit})
	}); err != nil {
		return fmt.Errorf("purge the value sets of %s: %w", period, err)
	}
	if err := q.EndCloseProgress(ctx, db.EndCloseProgressParams{TenantID: tenantID, Period: period}); err != nil {
		return fmt.Errorf("end the tally of %s: %w", period, err)
	}
	return nil
}

// untilFewer runs purge, a statement that deletes at most limit rows, until
// it deletes fewer.
func untilFewer(limit int32, purge func() (int64, error)) error {
	for {
		n, err := purge()
		if err != nil || n < int64(limit) {
			return err
		}
	}
}

// purgeClosedTallies purges what the chunked tallies of closed periods left
// (a close that crashed after it committed, or whose purge failed).
func (a *App) purgeClosedTallies(ctx context.Context) error {
	left, err := db.New(a.pool).ClosedWithValues(ctx, 100)
	if err != nil {
		return fmt.Errorf("find closed periods' tallies: %w", err)
	}
	for _, p := range left {
		if err := a.purgeTally(ctx, p.TenantID, p.Period); err != nil {
			return err
		}
	}
	return nil
}
