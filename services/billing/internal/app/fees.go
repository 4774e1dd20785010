package app

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// periodFees are the fixed-fee and minimum true-up lines of a tenant's
// period by currency (domain.FeeLines), from its subscriptions, the plans'
// versions billing holds and the period's lines priced by plan charges, as
// they stand in q's snapshot. Bounded by the tenant's subscriptions in the
// period and their plans' versions, whatever the usage.
func periodFees(ctx context.Context, q *db.Queries, tenantID, period string, cal domain.Calendar,
	lines []Line) (map[string][]events.FeeLine, error) {
	days, err := domain.PeriodDays(period, cal.Settings(period).Location())
	if err != nil {
		return nil, err
	}
	// The first day begins before the period when the zone changed to one
	// east of the last (the period begins where the one before ended): what
	// holds at its first instant counts too.
	since := cal.Start(period)
	if days[0].Before(since) {
		since = days[0]
	}
	subs, err := q.SubscriptionsDuring(ctx, db.SubscriptionsDuringParams{
		TenantID: tenantID, Since: since, Until: cal.End(period)})
	if err != nil {
		return nil, fmt.Errorf("read subscriptions of %s in %s: %w", tenantID, period, err)
	}
	if len(subs) == 0 {
		return nil, nil
	}
	spans := make([]domain.SubscriptionSpan, len(subs))
	codes := map[string]bool{}
	for i, s := range subs {
		spans[i] = domain.SubscriptionSpan{PlanCode: s.PlanCode, StartsAt: s.StartsAt}
		if s.EndsAt.Valid {
			spans[i].EndsAt = s.EndsAt.Time
		}
		codes[s.PlanCode] = true
	}
	names := make([]string, 0, len(codes))
	for c := range codes {
		names = append(names, c)
	}
	rows, err := q.PlanFeeVersions(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("read plan versions %v: %w", names, err)
	}
	versions := make([]domain.FeePlanVersion, len(rows))
	for i, r := range rows {
		v := domain.FeePlanVersion{Code: r.Code, Version: r.Version, Currency: r.Currency, EffectiveAt: r.EffectiveAt}
		if err := json.Unmarshal(r.FixedFees, &v.Fees); err != nil {
			return nil, fmt.Errorf("%w: fixed fees of plan %s v%d: %v", ErrInternal, r.Code, r.Version, err)
		}
		if r.MinimumSpend.Valid {
			m := r.MinimumSpend.Decimal
			v.MinimumSpend = &m
		}
		versions[i] = v
	}
	charged := map[domain.PlanKey]decimal.Decimal{}
	for _, l := range lines {
		if l.PlanCode == "" {
			continue
		}
		amount, err := LineAmount(l)
		if err != nil {
			return nil, err
		}
		k := domain.PlanKey{Code: l.PlanCode, Version: l.PriceVersion}
		charged[k] = charged[k].Add(amount)
	}
	return domain.FeeLines(days, spans, versions, charged)
}

// feeCandidateWindow is how far back the close scheduler looks for the
// periods of subscribed tenants without charges (their fees alone make an
// invoice): three months, past any grace period. A period of fees only
// that the scheduler did not see in that window (it was down longer) is
// closed by an explicit close.
const feeCandidateWindow = 92 * 24 * time.Hour

// feeCandidates are the unclosed periods within the window in which a
// subscription holds at some instant, but those among cands already: fees
// make them closeable even without a charge (a plan without fees gives an
// empty close, which issues nothing).
func (a *App) feeCandidates(ctx context.Context, q *db.Queries, cands []db.UnclosedPeriodsRow, now time.Time) ([]db.UnclosedPeriodsRow, error) {
	since := now.Add(-feeCandidateWindow)
	subs, err := q.SubscriptionsSince(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("find subscriptions since %s: %w", since, err)
	}
	if len(subs) == 0 {
		return nil, nil
	}
	seen := make(map[string]bool, len(cands))
	for _, c := range cands {
		seen[c.TenantID+"/"+c.Period] = true
	}
	tenants := make([]string, len(subs))
	for i, s := range subs {
		tenants[i] = s.TenantID
	}
	cals, err := a.TenantCalendars(ctx, a.pool, tenants)
	if err != nil {
		return nil, err
	}
	var arg db.PeriodFlagsParams
	for _, s := range subs {
		cal := cals[s.TenantID]
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
		for p, last := cal.PeriodOf(from), cal.PeriodOf(until); p <= last; p = domain.NextPeriod(p) {
			if k := s.TenantID + "/" + p; !seen[k] {
				seen[k] = true
				arg.TenantIds, arg.Periods = append(arg.TenantIds, s.TenantID), append(arg.Periods, p)
			}
		}
	}
	if len(arg.TenantIds) == 0 {
		return nil, nil
	}
	flags, err := q.PeriodFlags(ctx, arg)
	if err != nil {
		return nil, fmt.Errorf("read period flags: %w", err)
	}
	var out []db.UnclosedPeriodsRow
	for _, f := range flags {
		if f.Status != domain.StatusClosed {
			out = append(out, db.UnclosedPeriodsRow{TenantID: f.TenantID, Period: f.Period, Ended: f.Ended,
				Closing: f.Status == domain.StatusClosing})
		}
	}
	return out, nil
}
