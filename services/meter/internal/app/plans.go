package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/meter/internal/db"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

// Plan is one immutable plan version as the API shows it.
type Plan struct {
	PlanID       uuid.UUID           `json:"planId"`
	Code         string              `json:"code"`
	Version      int64               `json:"version"`
	Name         string              `json:"name"`
	Currency     string              `json:"currency"`
	FixedFees    []events.PlanFee    `json:"fixedFees"`
	Charges      []events.PlanCharge `json:"charges"`
	MinimumSpend *decimal.Decimal    `json:"minimumSpend,omitempty"`
	EffectiveAt  time.Time           `json:"effectiveAt"`
	PublishedAt  time.Time           `json:"publishedAt"`
	Actor        string              `json:"actor"`
	EventID      uuid.UUID           `json:"eventId"`
}

// PublishPlan is the command to publish the next version of a plan.
type PublishPlan struct {
	// Plan is the version, valid (domain.ParsePlan).
	Plan          domain.Plan
	CorrelationID string
	// Actor is the catalog-admin who sent it; required.
	Actor string
}

// PublishPlan publishes the next version of a plan in tx: under the plan's
// lock and then the plans' schedule shard's (events.PlanShard, decision
// 0021), the charges checked against the catalog, the version placed in
// the schedule (never backdated, never at or before a published
// watermark) and counted against Config.MaxPlanVersions of its UTC month,
// the immutable version and its PlanPublished in the outbox.
// On an error nothing may be committed (InTx does not).
func (a *App) PublishPlan(ctx context.Context, tx pgx.Tx, cmd PublishPlan) (Plan, error) {
	if cmd.Actor == "" {
		return Plan{}, ErrNoActor
	}
	p := cmd.Plan
	q := db.New(tx)
	meters := map[string]*catalog.Meter{}
	for _, c := range p.Charges {
		if _, seen := meters[c.MeterCode]; seen {
			continue
		}
		m, err := q.GetMeter(ctx, c.MeterCode)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			meters[c.MeterCode] = nil
		case err != nil:
			return Plan{}, fmt.Errorf("read meter %s: %w", c.MeterCode, err)
		default:
			def := meterOf(m).Definition()
			meters[c.MeterCode] = &def
		}
	}
	if err := domain.CheckPlanCharges(p.Charges, meters); err != nil {
		return Plan{}, err
	}
	plan, err := q.LockPlan(ctx, p.Code)
	if err != nil {
		return Plan{}, fmt.Errorf("lock plan %s: %w", p.Code, err)
	}
	sched, err := q.LockScheduleShard(ctx, events.PlanShard)
	if err != nil {
		return Plan{}, fmt.Errorf("lock the plans' schedule shard: %w", err)
	}
	publishedAt := domain.Instant(a.now())
	effectiveAt, err := p.Schedule(publishedAt, plan.LastEffectiveAt, sched.KnownThrough)
	if err != nil {
		return Plan{}, err
	}
	from, until := utcMonth(effectiveAt)
	n, err := q.CountPlanVersionsIn(ctx, db.CountPlanVersionsInParams{
		Code: p.Code, FromAt: from, UntilAt: until, Most: int32(a.cfg.MaxPlanVersions),
	})
	if err != nil {
		return Plan{}, fmt.Errorf("count the versions of plan %s: %w", p.Code, err)
	}
	if n >= int64(a.cfg.MaxPlanVersions) {
		return Plan{}, domain.PlanVersionLimitExceeded(p.Code, a.cfg.MaxPlanVersions, from.Format("2006-01"))
	}
	knownThrough := domain.Watermark(publishedAt, a.lead, sched.KnownThrough)
	seq, version := sched.LastSeq+1, plan.LastVersion+1
	planID, err := uuid.NewV7()
	if err != nil {
		return Plan{}, fmt.Errorf("new plan id: %w", err)
	}
	out := Plan{
		PlanID: planID, Code: p.Code, Version: version, Name: p.Name, Currency: p.Currency,
		FixedFees: nonNil(p.FixedFees), Charges: nonNil(p.Charges), MinimumSpend: p.MinimumSpend,
		EffectiveAt: effectiveAt, PublishedAt: publishedAt, Actor: cmd.Actor,
	}
	env, err := events.New(events.PlanPublished{
		PlanID: planID, Code: p.Code, Name: p.Name, Currency: p.Currency, Version: version,
		FixedFees: p.FixedFees, Charges: p.Charges, MinimumSpend: p.MinimumSpend, EffectiveAt: effectiveAt,
		ScheduleSeq: seq, KnownThrough: knownThrough, Actor: cmd.Actor,
	}, events.Meta{
		Producer: Producer, TenantID: events.CatalogTenant, AggregateID: p.Code, AggregateVersion: version,
		OccurredAt: publishedAt, CorrelationID: cmd.CorrelationID,
	})
	if err != nil {
		return Plan{}, err
	}
	out.EventID = env.EventID
	fees, err := json.Marshal(nonNil(p.FixedFees))
	if err != nil {
		return Plan{}, fmt.Errorf("encode fixed fees: %w", err)
	}
	charges, err := json.Marshal(nonNil(p.Charges))
	if err != nil {
		return Plan{}, fmt.Errorf("encode charges: %w", err)
	}
	if err := q.InsertPlanVersion(ctx, db.InsertPlanVersionParams{
		PlanID: planID, Code: p.Code, Version: version, Name: p.Name, Currency: p.Currency, FixedFees: fees,
		Charges: charges, MinimumSpend: nullDecimal(p.MinimumSpend), EffectiveAt: effectiveAt, PublishedAt: publishedAt,
		ScheduleSeq: seq, Actor: cmd.Actor, EventID: env.EventID,
	}); err != nil {
		return Plan{}, fmt.Errorf("insert plan version: %w", err)
	}
	n, err = q.AdvancePlan(ctx, db.AdvancePlanParams{Version: version, EffectiveAt: &effectiveAt, Code: p.Code})
	if err != nil {
		return Plan{}, fmt.Errorf("advance plan: %w", err)
	}
	if n != 1 {
		return Plan{}, errors.New("advance plan: the plan moved while locked")
	}
	n, err = q.AdvanceScheduleShard(ctx, db.AdvanceScheduleShardParams{Seq: seq, KnownThrough: knownThrough, Shard: events.PlanShard})
	if err != nil {
		return Plan{}, fmt.Errorf("advance the plans' schedule shard: %w", err)
	}
	if n != 1 {
		return Plan{}, errors.New("advance the plans' schedule shard: the shard moved while locked")
	}
	if err := events.Append(ctx, tx, env); err != nil {
		return Plan{}, err
	}
	return out, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// ListPlans reads the latest version of each plan after code afterCode, in
// code order, at most limit of them.
func (a *App) ListPlans(ctx context.Context, afterCode string, limit int32) ([]Plan, error) {
	rows, err := db.New(a.pool).ListLatestPlans(ctx, db.ListLatestPlansParams{AfterCode: afterCode, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list plans: %w", err)
	}
	out := make([]Plan, len(rows))
	for i, r := range rows {
		if out[i], err = planOf(db.ListPlanVersionsRow(r)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ListPlanVersions reads a plan's versions after afterVersion, in version
// order, at most limit of them; a code with no version is
// domain.PlanNotFound.
func (a *App) ListPlanVersions(ctx context.Context, code string, afterVersion int64, limit int32) ([]Plan, error) {
	q := db.New(a.pool)
	rows, err := q.ListPlanVersions(ctx, db.ListPlanVersionsParams{Code: code, AfterVersion: afterVersion, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list versions of plan %s: %w", code, err)
	}
	if len(rows) == 0 && afterVersion == 0 {
		return nil, domain.PlanNotFound(code)
	}
	out := make([]Plan, len(rows))
	for i, r := range rows {
		if out[i], err = planOf(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func planOf(r db.ListPlanVersionsRow) (Plan, error) {
	p := Plan{
		PlanID: r.PlanID, Code: r.Code, Version: r.Version, Name: r.Name, Currency: r.Currency,
		MinimumSpend: ptrDecimal(r.MinimumSpend), EffectiveAt: r.EffectiveAt.UTC(), PublishedAt: r.PublishedAt.UTC(),
		Actor: r.Actor, EventID: r.EventID,
	}
	if err := json.Unmarshal(r.FixedFees, &p.FixedFees); err != nil {
		return Plan{}, fmt.Errorf("decode fixed fees of plan %s v%d: %w", r.Code, r.Version, err)
	}
	if err := json.Unmarshal(r.Charges, &p.Charges); err != nil {
		return Plan{}, fmt.Errorf("decode charges of plan %s v%d: %w", r.Code, r.Version, err)
	}
	return p, nil
}
