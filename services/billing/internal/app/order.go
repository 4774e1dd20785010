package app

import (
	"context"
	"fmt"
	"time"

	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// earliestUnclosed is the earliest period of the tenant before period that
// has something to bill and is not closed: charges, or fees of a
// subscription holding in it within the close scheduler's window (the fee
// periods the scheduler closes; feeCandidates). "" when none. A close of
// period waits for it (decision 0014: periods close in order).
func (a *App) earliestUnclosed(ctx context.Context, x db.DBTX, tenantID, period string) (string, error) {
	q := db.New(x)
	charged, err := q.EarliestUnclosedBefore(ctx, db.EarliestUnclosedBeforeParams{TenantID: tenantID, Period: period})
	if err != nil {
		return "", fmt.Errorf("find unclosed periods before %s: %w", period, err)
	}
	latest, err := q.PreviousClosedPeriod(ctx, db.PreviousClosedPeriodParams{TenantID: tenantID, Period: period})
	if err != nil {
		return "", fmt.Errorf("find the period closed before %s: %w", period, err)
	}
	now := a.now()
	since := now.Add(-feeCandidateWindow)
	subs, err := q.TenantSubscriptionsSince(ctx, db.TenantSubscriptionsSinceParams{TenantID: tenantID, Since: since})
	if err != nil {
		return "", fmt.Errorf("find subscriptions of %s since %s: %w", tenantID, since, err)
	}
	earliest := charged
	if len(subs) == 0 {
		return earliest, nil
	}
	cals, err := calendars(ctx, x, tenantID)
	if err != nil {
		return "", err
	}
	cal := cals[tenantID]
	for _, s := range subs {
		from, until := s.StartsAt, now
		if from.Before(since) {
			from = since
		}
		if s.EndsAt.Valid && s.EndsAt.Time.Before(until) {
			until = s.EndsAt.Time.Add(-time.Microsecond) // its last instant
		}
		if from.After(until) {
			continue
		}
		// The first period it holds in after the latest closed one.
		p := cal.PeriodOf(from)
		if p <= latest {
			p = domain.NextPeriod(latest)
		}
		if p < period && p <= cal.PeriodOf(until) && (earliest == "" || p < earliest) {
			earliest = p
		}
	}
	return earliest, nil
}
