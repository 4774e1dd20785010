package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// Subscription is a tenant's subscription to a plan as the API shows it.
type Subscription struct {
	SubscriptionID uuid.UUID  `json:"subscriptionId"`
	TenantID       string     `json:"tenantId"`
	PlanCode       string     `json:"planCode"`
	StartsAt       time.Time  `json:"startsAt"`
	EndsAt         *time.Time `json:"endsAt,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	Actor          string     `json:"actor"`
}

func subscriptionOf(r db.Subscription) Subscription {
	s := Subscription{SubscriptionID: r.SubscriptionID, TenantID: r.TenantID, PlanCode: r.PlanCode,
		StartsAt: r.StartsAt.UTC(), CreatedAt: r.CreatedAt.UTC(), Actor: r.Actor}
	if r.EndsAt.Valid {
		t := r.EndsAt.Time.UTC()
		s.EndsAt = &t
	}
	return s
}

// Subscribe is the command to subscribe a tenant to a plan from StartsAt
// (zero: as soon as it may).
type Subscribe struct {
	TenantID, PlanCode string
	StartsAt           time.Time
	Actor              string
}

// InTx runs fn in a transaction of billing's database, committed when fn
// returns nil: the transaction a command runs in, with its Idempotency-Key
// claimed and its reply saved by the caller (httpapi).
func (a *App) InTx(ctx context.Context, fn func(pgx.Tx) error) error { return a.inTx(ctx, fn) }

// Subscribe subscribes a tenant to a plan in tx, under its schedule
// shard's row lock (decision 0021): never backdated, never at or before
// what raters know of the tenant's schedule, so no fact already rated
// could have been priced otherwise. The subscription in effect at its
// start (a plan change) ends there; one starting at or after it is a
// conflict (subscription_overlap); past Config.MaxSubscriptions in effect at
// any time from the start of the current period on (ended in it, in
// effect, or scheduled), it is refused (limit_exceeded): no period can hold
// more, which bounds its lines priced by a plan (decision 0014). On an
// error the caller must not commit.
func (a *App) Subscribe(ctx context.Context, tx pgx.Tx, cmd Subscribe) (Subscription, error) {
	if cmd.Actor == "" {
		return Subscription{}, ErrNoActor
	}
	q := db.New(tx)
	if _, err := q.LatestPlanVersion(ctx, cmd.PlanCode); errors.Is(err, pgx.ErrNoRows) {
		return Subscription{}, domain.UnknownPlan(cmd.PlanCode)
	} else if err != nil {
		return Subscription{}, fmt.Errorf("read plan %s: %w", cmd.PlanCode, err)
	}
	now, known, err := a.lockSubscriptions(ctx, q, cmd.TenantID)
	if err != nil {
		return Subscription{}, err
	}
	startsAt, err := domain.SubscriptionTime("startsAt", cmd.StartsAt, now, known)
	if err != nil {
		return Subscription{}, err
	}
	current, err := q.SubscriptionsFrom(ctx, db.SubscriptionsFromParams{TenantID: cmd.TenantID, At: startsAt})
	if err != nil {
		return Subscription{}, fmt.Errorf("read subscriptions of %s: %w", cmd.TenantID, err)
	}
	cals, err := calendars(ctx, tx, cmd.TenantID)
	if err != nil {
		return Subscription{}, err
	}
	cal := cals[cmd.TenantID]
	periodStart := cal.Start(cal.PeriodOf(now))
	live, err := q.CountLiveSubscriptions(ctx, db.CountLiveSubscriptionsParams{TenantID: cmd.TenantID, At: periodStart})
	if err != nil {
		return Subscription{}, fmt.Errorf("count subscriptions of %s: %w", cmd.TenantID, err)
	}
	if live >= int64(a.cfg.MaxSubscriptions) {
		return Subscription{}, domain.SubscriptionLimitExceeded(cmd.TenantID, a.cfg.MaxSubscriptions)
	}
	for _, s := range current {
		if !s.StartsAt.Before(startsAt) {
			return Subscription{}, domain.SubscriptionOverlap(s.SubscriptionID.String(), s.StartsAt)
		}
		// In effect at startsAt: the plan change ends it there.
		if _, err := q.EndSubscription(ctx, db.EndSubscriptionParams{
			EndsAt: pgtype.Timestamptz{Time: startsAt, Valid: true}, EndedBy: pgtype.Text{String: cmd.Actor, Valid: true},
			SubscriptionID: s.SubscriptionID, TenantID: cmd.TenantID,
		}); err != nil {
			return Subscription{}, fmt.Errorf("end subscription %s: %w", s.SubscriptionID, err)
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Subscription{}, fmt.Errorf("new subscription id: %w", err)
	}
	row := db.InsertSubscriptionParams{SubscriptionID: id, TenantID: cmd.TenantID, PlanCode: cmd.PlanCode,
		StartsAt: startsAt, CreatedAt: now, Actor: cmd.Actor}
	if err := q.InsertSubscription(ctx, row); err != nil {
		return Subscription{}, fmt.Errorf("insert subscription: %w", err)
	}
	return Subscription{SubscriptionID: id, TenantID: cmd.TenantID, PlanCode: cmd.PlanCode, StartsAt: startsAt,
		CreatedAt: now, Actor: cmd.Actor}, nil
}

// EndSubscription is the command to end a subscription at EndsAt (zero: as
// soon as it may).
type EndSubscription struct {
	TenantID       string
	SubscriptionID uuid.UUID
	EndsAt         time.Time
	Actor          string
}

// EndSubscription ends a subscription in tx, under the same rules as
// Subscribe: never backdated, never at or before what raters know; not
// past a later subscription's start; an end already passed stands.
func (a *App) EndSubscription(ctx context.Context, tx pgx.Tx, cmd EndSubscription) (Subscription, error) {
	if cmd.Actor == "" {
		return Subscription{}, ErrNoActor
	}
	q := db.New(tx)
	now, known, err := a.lockSubscriptions(ctx, q, cmd.TenantID)
	if err != nil {
		return Subscription{}, err
	}
	s, err := q.GetSubscription(ctx, db.GetSubscriptionParams{SubscriptionID: cmd.SubscriptionID, TenantID: cmd.TenantID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscription{}, domain.SubscriptionNotFound(cmd.SubscriptionID.String())
	}
	if err != nil {
		return Subscription{}, fmt.Errorf("read subscription %s: %w", cmd.SubscriptionID, err)
	}
	if s.EndsAt.Valid && (!s.EndsAt.Time.After(known) || !s.EndsAt.Time.After(now)) {
		return Subscription{}, domain.SubscriptionEnded(s.SubscriptionID.String(), s.EndsAt.Time)
	}
	endsAt, err := domain.SubscriptionTime("endsAt", cmd.EndsAt, now, known)
	if err != nil {
		return Subscription{}, err
	}
	if !endsAt.After(s.StartsAt) {
		return Subscription{}, domain.EndsBeforeStart(endsAt, s.StartsAt)
	}
	later, err := q.SubscriptionsFrom(ctx, db.SubscriptionsFromParams{TenantID: cmd.TenantID, At: s.StartsAt})
	if err != nil {
		return Subscription{}, fmt.Errorf("read subscriptions of %s: %w", cmd.TenantID, err)
	}
	for _, o := range later {
		if o.StartsAt.After(s.StartsAt) && o.StartsAt.Before(endsAt) {
			return Subscription{}, domain.SubscriptionOverlap(o.SubscriptionID.String(), o.StartsAt)
		}
	}
	if _, err := q.EndSubscription(ctx, db.EndSubscriptionParams{
		EndsAt: pgtype.Timestamptz{Time: endsAt, Valid: true}, EndedBy: pgtype.Text{String: cmd.Actor, Valid: true},
		SubscriptionID: s.SubscriptionID, TenantID: cmd.TenantID,
	}); err != nil {
		return Subscription{}, fmt.Errorf("end subscription %s: %w", s.SubscriptionID, err)
	}
	s.EndsAt = pgtype.Timestamptz{Time: endsAt, Valid: true}
	return subscriptionOf(s), nil
}

// lockSubscriptions takes the tenant's schedule shard's row (what raters
// know of the tenant's schedule cannot rise until tx ends) and returns now
// and what they know.
func (a *App) lockSubscriptions(ctx context.Context, q *db.Queries, tenantID string) (now, known time.Time, err error) {
	known, err = q.LockShardForSubscriptions(ctx, events.ScheduleShard(tenantID))
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("lock the schedule shard of %s: %w", tenantID, err)
	}
	return a.now(), known, nil
}

// SubscriptionPosition is a subscription's place in its tenant's list.
type SubscriptionPosition struct {
	StartsAt       time.Time `json:"s"`
	SubscriptionID uuid.UUID `json:"i"`
}

// Subscriptions reads a page of a tenant's subscriptions in (startsAt, id)
// order after a position (zero: from the first).
func (a *App) Subscriptions(ctx context.Context, tenantID string, after SubscriptionPosition, limit int32) ([]Subscription, error) {
	rows, err := db.New(a.pool).ListSubscriptions(ctx, db.ListSubscriptionsParams{
		TenantID: tenantID, AfterStartsAt: after.StartsAt, AfterID: after.SubscriptionID, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list subscriptions of %s: %w", tenantID, err)
	}
	out := make([]Subscription, len(rows))
	for i, r := range rows {
		out[i] = subscriptionOf(r)
	}
	return out, nil
}
