package app

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/usage/internal/db"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// Refusal is why one event of an all-or-nothing ingest was refused: its
// index in the request and the broken rule.
type Refusal struct {
	Index int
	Err   *domain.Error
}

// errRefused rolls back an all-or-nothing transaction that refused a fact
// (or decided facts only to name every refusal).
var errRefused = errors.New("a fact was refused: nothing is written")

// Ingest accepts CloudEvents all or nothing: each is mapped onto its fact
// through the replicated catalog (domain.FromCloudEvent: its type names
// the meter, its subject the tenant), then the facts of every tenant are
// decided in one transaction, committed only when none is refused (a replay
// is not a refusal). It returns the refusals, in index order; when there is
// any, nothing was written. An error means nothing was committed either.
func (a *App) Ingest(ctx context.Context, correlationID string, evs []domain.CloudEvent) ([]Refusal, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	var types []string
	for _, ev := range evs {
		if !slices.Contains(types, ev.Type) {
			types = append(types, ev.Type)
		}
	}
	cat, err := catalogByEventType(ctx, db.New(a.pool), types)
	if err != nil {
		return nil, err
	}
	now := a.now()
	var refused []Refusal
	var tenants []string
	var us []domain.Usage
	var at []int // the request index of each of us
	for i, ev := range evs {
		u, err := domain.FromCloudEvent(ev, cat, now)
		if err != nil {
			refused = append(refused, Refusal{Index: i, Err: err})
			continue
		}
		tenants, us, at = append(tenants, ev.Subject), append(us, u), append(at, i)
	}
	// The events that map are decided too, so that the answer names every
	// refusal; they are committed only when no event is refused.
	if len(us) > 0 {
		more, err := a.acceptAll(ctx, correlationID, tenants, us, len(refused) == 0)
		if err != nil {
			return nil, err
		}
		for _, x := range more {
			refused = append(refused, Refusal{Index: at[x.Index], Err: x.Err})
		}
	}
	slices.SortFunc(refused, func(x, y Refusal) int { return x.Index - y.Index })
	return refused, nil
}

// acceptAll decides facts of several tenants (tenants[i] is us[i]'s) in one
// transaction and commits only when none is refused and commit is set; the
// refusals' indexes are into us.
func (a *App) acceptAll(ctx context.Context, correlationID string, tenants []string, us []domain.Usage, commit bool) ([]Refusal, error) {
	// Tenants in order, each with its facts' indexes in request order, so
	// that concurrent ingests take their row locks in one order.
	byTenant := map[string][]int{}
	for i, t := range tenants {
		byTenant[t] = append(byTenant[t], i)
	}
	order := make([]string, 0, len(byTenant))
	for t := range byTenant {
		order = append(order, t)
	}
	slices.Sort(order)
	for attempt := 1; ; attempt++ {
		var refused []Refusal
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			refused = nil
			acceptedAt, err := a.acceptanceTime(ctx, tx)
			if err != nil {
				return err
			}
			q := db.New(tx)
			var out []envelope.Envelope
			for _, t := range order {
				idx := byTenant[t]
				group := make([]domain.Usage, len(idx))
				for j, i := range idx {
					group[j] = us[i]
				}
				res, envs, err := a.decideTenant(ctx, q, t, correlationID, acceptedAt, group)
				if err != nil {
					return err
				}
				for j, x := range res {
					if x.Outcome == Refused {
						refused = append(refused, Refusal{Index: idx[j], Err: x.Err})
					}
				}
				out = append(out, envs...)
			}
			if len(refused) > 0 || !commit {
				return errRefused
			}
			return events.Append(ctx, tx, out...)
		})
		if errors.Is(err, errRefused) {
			return refused, nil
		}
		if err == nil || attempt == maxAttempts || !retryable(err) {
			if err != nil {
				return nil, fmt.Errorf("ingest %d events: %w", len(us), err)
			}
			return nil, nil
		}
		a.log.WarnContext(ctx, "cloudevents ingest retried", "size", len(us), "tenants", len(order), "attempt", attempt, "err", err)
	}
}
