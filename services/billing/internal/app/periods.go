package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// SchedulerActor is the actor the close scheduler records on the periods it
// closes (decision 0010: every close records one).
const SchedulerActor = "system:scheduler"

// Calendars are the period calendars of some tenants (decision 0014).
type Calendars map[string]domain.Calendar

// Period is the period of instant t for tenant: the month of t in the
// tenant's zone of that period.
func (c Calendars) Period(tenantID string, t time.Time) string { return c[tenantID].PeriodOf(t) }

// calendars reads the settings of the tenants named and returns their
// calendars (a tenant without settings has the default one).
func calendars(ctx context.Context, q db.DBTX, tenantIDs ...string) (Calendars, error) {
	rows, err := db.New(q).TenantSettings(ctx, tenantIDs)
	if err != nil {
		return nil, fmt.Errorf("read tenant settings: %w", err)
	}
	by := map[string][]domain.Settings{}
	for _, r := range rows {
		var rates []events.TaxRate
		if err := json.Unmarshal(r.TaxRates, &rates); err != nil {
			return nil, fmt.Errorf("%w: tax rates of %s from %s: %v", ErrInternal, r.TenantID, r.EffectiveFrom, err)
		}
		st, err := domain.NewSettings(r.EffectiveFrom, r.TimeZone, time.Duration(r.GraceSeconds)*time.Second, rates)
		if err != nil {
			return nil, fmt.Errorf("%w: settings of %s from %s: %v", ErrInternal, r.TenantID, r.EffectiveFrom, err)
		}
		by[r.TenantID] = append(by[r.TenantID], st)
	}
	out := make(Calendars, len(tenantIDs))
	for _, t := range tenantIDs {
		out[t] = domain.NewCalendar(by[t])
	}
	return out, nil
}

// TenantCalendars reads the calendars of the tenants of some usage events
// (tenantIDs may repeat): rating takes each fact's period from them.
func (a *App) TenantCalendars(ctx context.Context, q db.DBTX, tenantIDs []string) (Calendars, error) {
	seen := map[string]bool{}
	var ids []string
	for _, t := range tenantIDs {
		if !seen[t] {
			seen[t] = true
			ids = append(ids, t)
		}
	}
	return calendars(ctx, q, ids...)
}

// CurrentPeriod is the tenant's period in progress now.
func (a *App) CurrentPeriod(ctx context.Context, tenantID string) (string, error) {
	cals, err := calendars(ctx, a.pool, tenantID)
	if err != nil {
		return "", err
	}
	return cals.Period(tenantID, a.now()), nil
}

// SettingsReply is the body of PUT .../settings: the settings and the first
// period they apply to.
type SettingsReply struct {
	TimeZone      string           `json:"timeZone"`
	GracePeriod   string           `json:"gracePeriod"`
	TaxRates      []events.TaxRate `json:"taxRates"`
	EffectiveFrom string           `json:"effectiveFrom"`
}

// PutSettings sets a tenant's period settings in tx for the periods not
// yet begun: from the period after the one in progress SettingsLead from
// now (so a period keeps the zone and grace it began with, and no fact
// already rated belongs to a period they change). A second change before
// that period begins replaces the first. Records the actor; on an error
// the caller must not commit.
func (a *App) PutSettings(ctx context.Context, tx pgx.Tx, r Request, st domain.Settings) (SettingsReply, error) {
	if err := r.checkActor(); err != nil {
		return SettingsReply{}, err
	}
	q := db.New(tx)
	if err := q.LockTenantSettings(ctx, r.TenantID); err != nil {
		return SettingsReply{}, fmt.Errorf("lock settings of %s: %w", r.TenantID, err)
	}
	cals, err := calendars(ctx, tx, r.TenantID)
	if err != nil {
		return SettingsReply{}, err
	}
	from := cals[r.TenantID].FirstChangeable(a.now())
	rates := st.TaxRates
	if rates == nil {
		rates = []events.TaxRate{}
	}
	ratesJSON, err := json.Marshal(rates)
	if err != nil {
		return SettingsReply{}, fmt.Errorf("encode tax rates: %w", err)
	}
	err = q.PutTenantSettings(ctx, db.PutTenantSettingsParams{
		TenantID: r.TenantID, EffectiveFrom: from, TimeZone: st.TimeZone,
		GraceSeconds: int64(st.Grace / time.Second), TaxRates: ratesJSON, Actor: r.Actor,
	})
	if err != nil {
		return SettingsReply{}, fmt.Errorf("put settings of %s: %w", r.TenantID, err)
	}
	return SettingsReply{TimeZone: st.TimeZone, GracePeriod: domain.FormatDuration(st.Grace), TaxRates: rates, EffectiveFrom: from}, nil
}

// SchedulerRun is what one pass of the close scheduler did.
type SchedulerRun struct {
	Ended  []string // "tenant/period" whose BillingPeriodEnded this pass appended
	Closed []string // "tenant/period" this pass closed (or finished closing)
}

// CloseDuePeriods is one pass of the close scheduler: of the periods with
// charges that are not closed, it closes each whose end plus grace has
// passed, and finishes each a close left closing (a crash between its
// steps), through the same code path as the HTTP close (ClosePeriod, actor
// SchedulerActor, no Idempotency-Key), and appends BillingPeriodEnded once
// for each that has ended but is still in grace. Safe with any number of instances at
// once: a close takes the period's exclusive lock and closes a period once
// (a second close of it publishes nothing), and BillingPeriodEnded is
// appended with its period_ended row, whose key lets only one in.
func (a *App) CloseDuePeriods(ctx context.Context) (SchedulerRun, error) {
	var run SchedulerRun
	q := db.New(a.pool)
	if err := a.purgeClosedTallies(ctx); err != nil {
		return run, err
	}
	// Closes requested and waiting for usage (decision 0014): finished
	// once usage has caught up, under the requester's actor.
	waits, err := q.RequestedCloses(ctx)
	if err != nil {
		return run, fmt.Errorf("find requested closes: %w", err)
	}
	requested := make(map[string]bool, len(waits))
	waiting, oldest := 0, time.Duration(0)
	for _, w := range waits {
		name := w.TenantID + "/" + w.Period
		requested[name] = true
		closed, err := a.scheduledClose(ctx, w.TenantID, w.Period, w.CloseRequestedBy)
		if err != nil {
			return run, fmt.Errorf("close %s: %w", name, err)
		}
		if closed {
			run.Closed = append(run.Closed, name)
			continue
		}
		waiting++
		oldest = max(oldest, a.now().Sub(w.CloseRequestedAt))
	}
	a.observeWaiting(waiting, oldest)
	cands, err := q.UnclosedPeriods(ctx)
	if err != nil {
		return run, fmt.Errorf("find unclosed periods: %w", err)
	}
	fees, err := a.feeCandidates(ctx, q, cands, a.now())
	if err != nil {
		return run, err
	}
	cands = append(cands, fees...)
	if len(cands) == 0 {
		return run, nil
	}
	// In period order per tenant: a period closes after the earlier ones
	// (a close refused for an earlier open period is tried again next pass).
	slices.SortFunc(cands, func(x, y db.UnclosedPeriodsRow) int {
		return cmp.Or(cmp.Compare(x.TenantID, y.TenantID), cmp.Compare(x.Period, y.Period))
	})
	tenants := make([]string, len(cands))
	for i, c := range cands {
		tenants[i] = c.TenantID
	}
	cals, err := a.TenantCalendars(ctx, a.pool, tenants)
	if err != nil {
		return run, err
	}
	now := a.now()
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return run, err
		}
		cal := cals[c.TenantID]
		name := c.TenantID + "/" + c.Period
		switch {
		case requested[name]:
			// finished above, by the requester's actor
		case c.Closing || !now.Before(cal.ClosesAt(c.Period)):
			closed, err := a.scheduledClose(ctx, c.TenantID, c.Period, SchedulerActor)
			if err != nil {
				return run, fmt.Errorf("close %s: %w", name, err)
			}
			if closed {
				run.Closed = append(run.Closed, name)
			}
		case !c.Ended && !now.Before(cal.End(c.Period)):
			appended, err := a.periodEnded(ctx, c.TenantID, c.Period, cal)
			if err != nil {
				return run, fmt.Errorf("end %s: %w", name, err)
			}
			if appended {
				run.Ended = append(run.Ended, name)
			}
		}
	}
	return run, nil
}

// scheduledClose runs a close for the scheduler, without waiting and
// without a key: true when the period is closed, false when it waits for
// usage.
func (a *App) scheduledClose(ctx context.Context, tenantID, period, actor string) (bool, error) {
	if actor == "" {
		actor = SchedulerActor
	}
	c, err := a.closePeriod(ctx, Request{TenantID: tenantID, Actor: actor, CorrelationID: "scheduler-" + period},
		period, noKey{}, 0)
	var refused *domain.Error
	if errors.As(err, &refused) && refused.Code == domain.CodeEarlierPeriodOpen {
		return false, nil // closed once the earlier period is
	}
	if err != nil {
		return false, err
	}
	return c.Status == domain.StatusClosed, nil
}

// periodEnded records that a period went into grace and appends
// BillingPeriodEnded, once: false when it was recorded before.
func (a *App) periodEnded(ctx context.Context, tenantID, period string, cal domain.Calendar) (bool, error) {
	ended := events.BillingPeriodEnded{
		Period: period, TimeZone: cal.Settings(period).TimeZone, EndedAt: cal.End(period), ClosesAt: cal.ClosesAt(period),
	}
	env, err := events.New(ended, events.Meta{
		Producer: Producer, TenantID: tenantID, AggregateID: period, OccurredAt: a.now().UTC(),
		CorrelationID: "scheduler-" + period,
	})
	if err != nil {
		return false, err
	}
	var appended bool
	err = a.inTx(ctx, func(tx pgx.Tx) error {
		n, err := db.New(tx).InsertPeriodEnded(ctx, db.InsertPeriodEndedParams{
			TenantID: tenantID, Period: period, EndedAt: ended.EndedAt, ClosesAt: ended.ClosesAt, EventID: env.EventID,
		})
		if err != nil {
			return fmt.Errorf("record period end: %w", err)
		}
		if n == 0 {
			return nil
		}
		appended = true
		return events.Append(ctx, tx, env)
	})
	return appended, err
}

// RunScheduler runs CloseDuePeriods every Config.CloseInterval until ctx
// ends. A failed pass is logged and retried at the next tick.
func (a *App) RunScheduler(ctx context.Context) error {
	t := time.NewTicker(a.cfg.CloseInterval)
	defer t.Stop()
	for {
		run, err := a.CloseDuePeriods(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			a.log.WarnContext(ctx, "close scheduler pass failed", "err", err)
		case len(run.Closed)+len(run.Ended) > 0:
			a.log.InfoContext(ctx, "close scheduler", "closed", run.Closed, "ended", run.Ended)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// occurrencePeriods are the periods the usage facts us occurred in, each in
// its tenant's calendar (rating's one read of the settings per batch).
func (a *App) occurrencePeriods(ctx context.Context, q db.DBTX, ds []*envelope.Decoded, us []events.UsageAccepted) ([]string, error) {
	tenants := make([]string, len(ds))
	for i, d := range ds {
		tenants[i] = d.Envelope.TenantID
	}
	cals, err := a.TenantCalendars(ctx, q, tenants)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = cals.Period(tenants[i], u.OccurredAt)
	}
	return out, nil
}

// occurrencePeriod is the period a tenant's fact that occurred at t belongs to.
func (a *App) occurrencePeriod(ctx context.Context, q db.DBTX, tenantID string, t time.Time) (string, error) {
	cals, err := calendars(ctx, q, tenantID)
	if err != nil {
		return "", err
	}
	return cals.Period(tenantID, t), nil
}
