package app

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// maxRatingAttempts bounds how often a rating follows a period that started
// closing while it was being rated (each close moves it one period on).
const maxRatingAttempts = 4

// OnUsagesAccepted rates usage facts as OnUsageAccepted does each, in one
// round trip for all of them in the common case: the shared locks of their
// occurrence periods, taken in key order, then one statement that reads each
// fact's meter, known schedule, price-sheet entry in effect and period
// status, and inserts the charges of the facts that can be rated. A fact
// whose meter billing does not hold yet waits for its MeterDefined
// (MeterKey); one whose tenant's schedule shard billing does not know through
// its occurrence yet waits for it (ScheduleKey); one known but with no entry in
// effect is rated unpriced; one whose period is closing or closed is rated
// alone by OnUsageAccepted, late into the next open period.
func (a *App) OnUsagesAccepted(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, us []events.UsageAccepted) ([]inbox.Outcome, error) {
	for i, d := range ds {
		if err := checkUsageAggregate(&d.Envelope, us[i]); err != nil {
			return nil, inbox.ItemError(i, err)
		}
	}
	periods, err := a.occurrencePeriods(ctx, tx, ds, us)
	if err != nil {
		return nil, err
	}
	b, err := newRating(ds, us, periods, false)
	if err != nil {
		return nil, err
	}
	rows, err := b.rate(ctx, tx, a.cfg.PartsFoldAt)
	if err != nil {
		return nil, err
	}
	pricings, err := versionPricings(ctx, tx, ds, us, rows)
	if err != nil {
		return nil, err
	}
	outs := make([]inbox.Outcome, len(ds))
	for i, row := range rows {
		in, u := &ds[i].Envelope, us[i]
		wait, err := unrated(in, u, row)
		if err != nil {
			return nil, inbox.ItemError(i, err)
		}
		if wait != "" { // nothing was written for it
			outs[i] = inbox.Outcome{Wait: wait}
			continue
		}
		switch row.Status {
		case domain.StatusOpen:
			out, err := a.rated(in, u, row, b.charge(i), pricings)
			if err != nil {
				return nil, err
			}
			outs[i] = out
		case domain.StatusClosing, domain.StatusClosed:
			// Nothing was written for it: rated alone, late.
			out, err := a.OnUsageAccepted(ctx, tx, ds[i], u)
			if err != nil {
				return nil, inbox.ItemError(i, err)
			}
			outs[i] = out
		default:
			return nil, fmt.Errorf("%w: period %s of %s has status %q", ErrInternal, periods[i], in.TenantID, row.Status)
		}
	}
	return outs, nil
}

// OnUsageAccepted rates one usage fact: exactly one charge per usage event,
// at the price-sheet entry in effect at its occurrence (or unpriced when
// none is), from billing's own evidence and only once billing holds its
// meter and knows the series' schedule through the occurrence (deferred
// until then), into the period of its occurrence or, when that period is
// closing or closed, the earliest open period after it (late). The charge is
// its own aggregate (charge/<id>, version 1) and ChargeRated is appended with
// it: nothing a charge writes is shared with another charge, so one tenant's
// usage is rated by every consumer at once. A period's close is kept
// consistent by the period's advisory lock, held shared here and
// exclusively by the close (see ClosePeriod). One round trip in the common
// case: lock and rate, pipelined; ChargeRated is appended by the inbox with
// the run's decisions (inbox.Outcome.Publish).
func (a *App) OnUsageAccepted(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, u events.UsageAccepted) (inbox.Outcome, error) {
	in := &d.Envelope
	if err := checkUsageAggregate(in, u); err != nil {
		return inbox.Outcome{}, err
	}
	occurred, err := a.occurrencePeriod(ctx, tx, in.TenantID, u.OccurredAt)
	if err != nil {
		return inbox.Outcome{}, err
	}
	ds, us := []*envelope.Decoded{d}, []events.UsageAccepted{u}
	period, late := occurred, false
	for attempt := 1; ; attempt++ {
		b, err := newRating(ds, us, []string{period}, late)
		if err != nil {
			return inbox.Outcome{}, err
		}
		rows, err := b.rate(ctx, tx, a.cfg.PartsFoldAt)
		if err != nil {
			return inbox.Outcome{}, err
		}
		row := rows[0]
		wait, err := unrated(in, u, row)
		if err != nil || wait != "" {
			return inbox.Outcome{Wait: wait}, err
		}
		switch row.Status {
		case domain.StatusOpen:
			pricings, err := versionPricings(ctx, tx, ds, us, rows)
			if err != nil {
				return inbox.Outcome{}, err
			}
			return a.rated(in, u, row, b.charge(0), pricings)
		case domain.StatusClosing, domain.StatusClosed:
		default:
			return inbox.Outcome{}, fmt.Errorf("%w: period %s of %s has status %q", ErrInternal, period, in.TenantID, row.Status)
		}
		// The period is closing or closed: nothing was written. Rate into
		// the earliest open period after the occurrence's.
		if attempt == maxRatingAttempts {
			return inbox.Outcome{}, fmt.Errorf("rate usage event %s: periods kept closing under it (now at %s)", in.EventID, period)
		}
		notOpen, err := db.New(tx).NonOpenPeriodsFrom(ctx, db.NonOpenPeriodsFromParams{TenantID: in.TenantID, Period: occurred})
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("find open period after %s: %w", occurred, err)
		}
		period, late = domain.RatingPeriod(occurred, notOpen)
	}
}

func checkUsageAggregate(in *envelope.Envelope, u events.UsageAccepted) error {
	if in.AggregateType != events.AggregateUsage || in.AggregateID != u.UsageID.String() {
		return inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"UsageAccepted of usage %s is on aggregate %s/%s", u.UsageID, in.AggregateType, in.AggregateID))
	}
	return nil
}

// rating is one RateUsages call: the facts, each with the ids of the charge
// and the ChargeRated it would make (made first: the charge row records the
// id of the event it emits).
type rating struct{ arg db.RateUsagesParams }

func newRating(ds []*envelope.Decoded, us []events.UsageAccepted, periods []string, late bool) (*rating, error) {
	n := len(ds)
	arg := db.RateUsagesParams{
		TenantIds: make([]string, n), MeterCodes: make([]string, n), Currencies: make([]string, n),
		Periods: make([]string, n), ChargeIds: make([]uuid.UUID, n),
		EventIds: make([]uuid.UUID, n), UsageEventIds: make([]uuid.UUID, n), UsageIds: make([]uuid.UUID, n),
		Quantities: make([]decimal.Decimal, n), OccurredAts: make([]time.Time, n), Lates: make([]bool, n),
		Properties: make([]string, n), SourceSystems: make([]string, n), SourceEventIds: make([]string, n),
		Shards: make([]int32, n),
	}
	for i, d := range ds {
		u, in := us[i], &d.Envelope
		chargeID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new charge id: %w", err)
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new event id: %w", err)
		}
		props, err := dimensionsJSON(u.Properties)
		if err != nil {
			return nil, err
		}
		arg.TenantIds[i], arg.MeterCodes[i], arg.Currencies[i] = in.TenantID, u.MeterCode, u.Currency
		arg.Shards[i] = events.ScheduleShard(in.TenantID)
		arg.Periods[i], arg.ChargeIds[i], arg.EventIds[i] = periods[i], chargeID, eventID
		arg.UsageEventIds[i], arg.UsageIds[i] = in.EventID, u.UsageID
		arg.Quantities[i], arg.OccurredAts[i], arg.Lates[i] = u.Quantity, u.OccurredAt, late
		arg.Properties[i], arg.SourceSystems[i], arg.SourceEventIds[i] = string(props), u.SourceSystem, u.SourceEventID
	}
	return &rating{arg: arg}, nil
}

// rate runs the rating statement under the periods' shared locks, and
// folds the parts of their lines past foldAt (FoldParts).
func (r *rating) rate(ctx context.Context, tx pgx.Tx, foldAt int) ([]db.RateUsagesRow, error) {
	n := len(r.arg.TenantIds)
	rows, err := db.RateUsagesLocked(ctx, tx, r.arg, int32(foldAt))
	if err != nil {
		return nil, fmt.Errorf("rate %d usage events: %w", n, err)
	}
	if len(rows) != n {
		return nil, fmt.Errorf("rate %d usage events: %d results", n, len(rows))
	}
	return rows, nil
}

// chargeSlot is where fact i's charge went: its ids, period and lateness.
type chargeSlot struct {
	chargeID, eventID uuid.UUID
	period            string
	late              bool
}

func (r *rating) charge(i int) chargeSlot {
	return chargeSlot{chargeID: r.arg.ChargeIds[i], eventID: r.arg.EventIds[i], period: r.arg.Periods[i], late: r.arg.Lates[i]}
}

// MeterKey is the wait key of usage of a meter billing holds no definition
// of: the aggregate key of its MeterDefined, provided when it is applied.
func MeterKey(meterCode string) string {
	return inbox.AggregateKey(events.CatalogTenant, events.AggregateMeter, meterCode, 1)
}

// unrated says why the rating statement did not rate a fact, but for its
// period's status: nothing when it was rated (priced or unpriced); the key
// it waits for when its meter is not held yet (its MeterDefined) or its
// schedule is not known through its occurrence (its tenant's schedule
// shard, or the plans' for a subscriber); an error quarantining a
// unique_count fact without the value it counts (usage refuses those).
func unrated(in *envelope.Envelope, u events.UsageAccepted, row db.RateUsagesRow) (wait string, err error) {
	switch {
	case !row.Defined:
		return MeterKey(u.MeterCode), nil
	case !row.TenantKnown:
		return ScheduleKey(events.ScheduleShard(in.TenantID), u.OccurredAt), nil
	case !row.Known: // subscribed to a plan then: the plans' schedule too
		return ScheduleKey(events.PlanShard, u.OccurredAt), nil
	case row.Aggregation == catalog.UniqueCount && row.Value == "":
		return "", inbox.Permanent(catalog.CodeMissingValue, fmt.Errorf(
			"usage %s of unique_count meter %s has no value of the property the meter counts", u.UsageID, u.MeterCode))
	}
	return "", nil
}

// seriesVersion names one version of a tenant's price series, or (plan
// set, tenant and currency empty) one charge of a plan version: its meter,
// version and dimensions key.
type seriesVersion struct {
	tenant, meter, currency string
	version                 int64
	plan, dimensionsKey     string
}

// pricingOf is the key of the pricing a rated row's charge carries.
func pricingOf(tenant string, u events.UsageAccepted, row db.RateUsagesRow) seriesVersion {
	if row.PlanCode != "" {
		return seriesVersion{meter: u.MeterCode, version: row.PriceVersion, plan: row.PlanCode, dimensionsKey: row.DimensionsKey}
	}
	return seriesVersion{tenant: tenant, meter: u.MeterCode, currency: u.Currency, version: row.PriceVersion}
}

// versionPricings reads, in one round trip per tenant (and one for plan
// charges), the pricing of the versions whose charges carry it but whose
// model is not unit (a unit version's pricing is its unit price, which the
// rating returned); none when there are none.
func versionPricings(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, us []events.UsageAccepted,
	rows []db.RateUsagesRow) (map[seriesVersion]*pricing.Pricing, error) {
	out := map[seriesVersion]*pricing.Pricing{}
	byTenant := map[string]*db.VersionPricingsParams{}
	var plans db.PlanChargesParams
	for i, row := range rows {
		if !row.Defined || !row.Known || !row.Priced || row.Model == pricing.Unit || row.Status != domain.StatusOpen {
			continue
		}
		if row.PlanCode != "" {
			plans.Codes = append(plans.Codes, row.PlanCode)
			plans.Versions = append(plans.Versions, row.PriceVersion)
			plans.MeterCodes = append(plans.MeterCodes, us[i].MeterCode)
			plans.DimensionsKeys = append(plans.DimensionsKeys, row.DimensionsKey)
			continue
		}
		t := ds[i].Envelope.TenantID
		if byTenant[t] == nil {
			byTenant[t] = &db.VersionPricingsParams{TenantID: t}
		}
		p := byTenant[t]
		p.MeterCodes = append(p.MeterCodes, us[i].MeterCode)
		p.Currencies = append(p.Currencies, us[i].Currency)
		p.Versions = append(p.Versions, row.PriceVersion)
	}
	for t, p := range byTenant {
		vs, err := db.New(tx).VersionPricings(ctx, *p)
		if err != nil {
			return nil, fmt.Errorf("read version pricings: %w", err)
		}
		for _, v := range vs {
			pr, err := evidencePricing(v.Model, v.UnitPrice, v.Tiers, v.PackageSize, v.PackagePrice)
			if err != nil {
				return nil, err
			}
			out[seriesVersion{tenant: t, meter: v.MeterCode, currency: v.Currency, version: v.Version}] = &pr
		}
	}
	if len(plans.Codes) > 0 {
		cs, err := db.New(tx).PlanCharges(ctx, plans)
		if err != nil {
			return nil, fmt.Errorf("read plan charge pricings: %w", err)
		}
		for _, c := range cs {
			pr, err := evidencePricing(c.Model, c.UnitPrice, c.Tiers, c.PackageSize, c.PackagePrice)
			if err != nil {
				return nil, err
			}
			out[seriesVersion{meter: c.MeterCode, version: c.Version, plan: c.Code, dimensionsKey: c.DimensionsKey}] = &pr
		}
	}
	return out, nil
}

// evidencePricing is the pricing of a price_evidence row.
func evidencePricing(model string, unitPrice decimal.Decimal, tiers []byte, size, price decimal.Decimal) (pricing.Pricing, error) {
	switch model {
	case pricing.Unit:
		return pricing.UnitPricing(unitPrice), nil
	case pricing.Package:
		return pricing.Pricing{Model: model, PackageSize: &size, PackagePrice: &price}, nil
	}
	p := pricing.Pricing{Model: model}
	if err := json.Unmarshal(tiers, &p.Tiers); err != nil {
		return pricing.Pricing{}, fmt.Errorf("decode tiers of a %s price: %w", model, err)
	}
	return p, nil
}

// rated is the outcome of a fact the rating statement rated into slot: its
// ChargeRated.
func (a *App) rated(in *envelope.Envelope, u events.UsageAccepted, row db.RateUsagesRow, slot chargeSlot,
	pricings map[seriesVersion]*pricing.Pricing) (inbox.Outcome, error) {
	env, err := a.chargeRated(in, u, row, slot, pricings)
	if err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Outcome{Publish: []inbox.Publication{{Topic: events.Topic(env.EventType), Event: env}}}, nil
}

// chargeRated is the ChargeRated of the charge the rating statement wrote
// for usage event in: at the entry it chose (its version, dimensions and,
// when the line is priced as a whole, pricing), or unpriced. A sum or count
// charge under unit pricing has its own amount; the others carry the
// version's pricing instead.
func (a *App) chargeRated(in *envelope.Envelope, u events.UsageAccepted, row db.RateUsagesRow, slot chargeSlot,
	pricings map[seriesVersion]*pricing.Pricing) (envelope.Envelope, error) {
	charge := events.ChargeRated{
		ChargeID: slot.chargeID, UsageEventID: in.EventID, UsageID: u.UsageID, MeterCode: u.MeterCode,
		Currency: u.Currency, Quantity: u.Quantity, UnitPrice: row.UnitPrice, PriceVersion: row.PriceVersion,
		Period: slot.period, Late: slot.late, OccurredAt: u.OccurredAt,
		Aggregation: row.Aggregation, Properties: u.Properties, SourceSystem: u.SourceSystem,
		SourceEventID: u.SourceEventID, Value: row.Value, Unpriced: !row.Priced, PlanCode: row.PlanCode,
	}
	charge.Amount = charge.Counted().Mul(charge.UnitPrice)
	if row.Priced {
		if string(row.Dimensions) != "{}" {
			if err := json.Unmarshal(row.Dimensions, &charge.Dimensions); err != nil {
				return envelope.Envelope{}, fmt.Errorf("decode the dimensions of %s v%d: %w", u.MeterCode, row.PriceVersion, err)
			}
		}
		var pr *pricing.Pricing
		if row.Model == pricing.Unit {
			unit := pricing.UnitPricing(row.PriceUnitPrice)
			pr = &unit
		} else {
			pr = pricings[pricingOf(in.TenantID, u, row)]
		}
		if pr == nil {
			return envelope.Envelope{}, fmt.Errorf("%w: no pricing of %s %s v%d", ErrInternal, u.MeterCode, u.Currency, row.PriceVersion)
		}
		if pr.Model != pricing.Unit || !catalog.PricedPerCharge(row.Aggregation) {
			charge.Model, charge.Pricing = pr.Model, pr
		}
	}
	return events.Caused(in, charge, events.Meta{
		Producer: Producer, TenantID: in.TenantID, AggregateID: slot.chargeID.String(), OccurredAt: a.now(), EventID: slot.eventID,
	})
}
