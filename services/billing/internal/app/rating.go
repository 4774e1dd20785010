package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

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

// OnPriceActivated replicates a price version as price evidence and raises
// what billing knows of the series' schedule to the event's knownThrough
// (decision 0011). A replay of a version changes nothing. Applying it
// provides the aggregate key of the version, which wakes the series'
// watermarks waiting for it, and the schedule keys of the seconds it makes
// known, which wake the usage waiting for them.
func (s *Service) OnPriceActivated(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceActivated) (_ inbox.Outcome, err error) {
	e := d.Envelope
	if e.AggregateType != events.AggregatePrice || e.AggregateID != events.PriceSeriesID(p.MeterCode, p.Currency) ||
		e.AggregateVersion != p.Version {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"PriceActivated of %s v%d is on aggregate %s/%s v%d", events.PriceSeriesID(p.MeterCode, p.Currency),
			p.Version, e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	if !p.KnownThrough.IsZero() {
		if err := lockSchedule(ctx, tx, e.TenantID, p.MeterCode, p.Currency); err != nil {
			return inbox.Outcome{}, err
		}
	}
	pr := p.Pricing()
	ev := db.InsertPriceEvidenceParams{
		TenantID: e.TenantID, MeterCode: p.MeterCode, Currency: p.Currency, Version: p.Version,
		UnitPrice: p.UnitPrice, EffectiveAt: p.EffectiveAt, PriceID: p.PriceID, EventID: e.EventID, Model: pr.Model,
	}
	if pr.Model != pricing.Unit {
		ev.UnitPrice = decimal.Zero
	}
	if len(pr.Tiers) > 0 {
		if ev.Tiers, err = json.Marshal(pr.Tiers); err != nil {
			return inbox.Outcome{}, fmt.Errorf("encode tiers: %w", err)
		}
	}
	if pr.PackageSize != nil {
		ev.PackageSize, ev.PackagePrice = *pr.PackageSize, *pr.PackagePrice
	}
	_, err = db.New(tx).InsertPriceEvidence(ctx, ev)
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("insert price evidence: %w", err)
	}
	if p.KnownThrough.IsZero() {
		return inbox.Outcome{}, nil
	}
	keys, err := raiseKnownThrough(ctx, tx, e.TenantID, p.MeterCode, p.Currency, p.KnownThrough)
	if err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Outcome{Provides: keys}, nil
}

// OnPriceScheduleWatermark raises what billing knows of a series' schedule
// to the watermark's knownThrough, once billing holds the version it names
// (and so every version before it); until then it is deferred, woken by
// that version's PriceActivated. A watermark lower than what billing knows
// changes nothing. It provides the schedule keys of the seconds it makes
// known.
func (s *Service) OnPriceScheduleWatermark(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceScheduleWatermark) (inbox.Outcome, error) {
	e := d.Envelope
	if e.AggregateType != events.AggregatePriceSchedule || e.AggregateVersion != 1 ||
		e.AggregateID != events.PriceScheduleID(p.MeterCode, p.Currency, p.KnownThrough) {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"PriceScheduleWatermark of %s through %s is on aggregate %s/%s v%d", events.PriceSeriesID(p.MeterCode, p.Currency),
			p.KnownThrough.Format(time.RFC3339Nano), e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	held, err := db.New(tx).HasPriceVersion(ctx, db.HasPriceVersionParams{
		TenantID: e.TenantID, MeterCode: p.MeterCode, Currency: p.Currency, Version: p.Version,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("read price evidence: %w", err)
	}
	if !held {
		return inbox.Outcome{}, inbox.DeferUntil(inbox.AggregateKey(e.TenantID, events.AggregatePrice,
			events.PriceSeriesID(p.MeterCode, p.Currency), p.Version))
	}
	if err := lockSchedule(ctx, tx, e.TenantID, p.MeterCode, p.Currency); err != nil {
		return inbox.Outcome{}, err
	}
	keys, err := raiseKnownThrough(ctx, tx, e.TenantID, p.MeterCode, p.Currency, p.KnownThrough)
	if err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Outcome{Provides: keys}, nil
}

// lockSchedule takes the series' schedule row for the transaction, or
// defers the event when another transaction holds it: waiting for it could
// deadlock (a batch raises several series in its partition's order, and a
// series' watermarks spread over partitions). The holder's raise provides
// scheduleFreeKey when it commits, which decides the event again; so does
// the inbox's sweep, if the holder rolls back.
func lockSchedule(ctx context.Context, tx pgx.Tx, tenantID, meterCode, currency string) error {
	busy, err := db.New(tx).TryLockPriceSchedule(ctx, db.TryLockPriceScheduleParams{
		TenantID: tenantID, MeterCode: meterCode, Currency: currency,
	})
	if err != nil {
		return fmt.Errorf("lock the price schedule: %w", err)
	}
	if busy {
		return inbox.DeferUntil(scheduleFreeKey(tenantID, meterCode, currency))
	}
	return nil
}

// scheduleFreeKey is provided by every transaction that held a series'
// schedule row (see lockSchedule).
func scheduleFreeKey(tenantID, meterCode, currency string) string {
	return "schedule-free/" + tenantID + "/" + events.PriceSeriesID(meterCode, currency)
}

// raiseKnownThrough raises a series' known schedule (its row taken by
// lockSchedule) and returns the schedule keys of the seconds that became
// known (none when it did not rise) and the series' scheduleFreeKey.
func raiseKnownThrough(ctx context.Context, tx pgx.Tx, tenantID, meterCode, currency string, through time.Time) ([]string, error) {
	row, err := db.New(tx).RaiseKnownThrough(ctx, db.RaiseKnownThroughParams{
		TenantID: tenantID, MeterCode: meterCode, Currency: currency, KnownThrough: through,
	})
	if err != nil {
		return nil, fmt.Errorf("raise known schedule: %w", err)
	}
	free := scheduleFreeKey(tenantID, meterCode, currency)
	if !row.Raised {
		return []string{free}, nil
	}
	var prev *time.Time
	if row.Had {
		prev = &row.Previous
	}
	return append(ScheduleKeys(tenantID, meterCode, currency, prev, through), free), nil
}

// maxScheduleKeys bounds the keys one rise of the known schedule provides:
// usage waiting on older seconds (billing was far behind) is decided again
// by the inbox's sweep.
const maxScheduleKeys = 3600

// ScheduleKey is the wait key of usage that occurred at `at` while billing
// did not know the series' schedule through it: one key per second of
// occurrence, so a rise of the known schedule wakes exactly the seconds it
// covers.
func ScheduleKey(tenantID, meterCode, currency string, at time.Time) string {
	return scheduleKey(tenantID, meterCode, currency, at.Unix())
}

func scheduleKey(tenantID, meterCode, currency string, second int64) string {
	return "schedule/" + tenantID + "/" + events.PriceSeriesID(meterCode, currency) + "@" + strconv.FormatInt(second, 10)
}

// ScheduleKeys are the keys of the seconds a rise of the known schedule
// from prev (nil: nothing known) to through makes known, wholly or in part
// (usage of a second known in part that is still beyond it waits again, for
// the next rise, which provides that second again): the seconds from prev's
// through through's, at most maxScheduleKeys of the latest.
func ScheduleKeys(tenantID, meterCode, currency string, prev *time.Time, through time.Time) []string {
	last := floorSecond(through)
	first := last - maxScheduleKeys + 1
	if prev != nil {
		first = max(first, floorSecond(*prev))
	}
	keys := make([]string, 0, last-first+1)
	for sec := first; sec <= last; sec++ {
		keys = append(keys, scheduleKey(tenantID, meterCode, currency, sec))
	}
	return keys
}

// floorSecond is the Unix second t falls in (time.Unix rounds toward zero
// before 1970; this floors).
func floorSecond(t time.Time) int64 {
	s := t.Unix()
	if t.Before(time.Unix(s, 0)) {
		s--
	}
	return s
}

// OnUsagesAccepted rates usage facts as OnUsageAccepted does each, in one
// round trip for all of them in the common case: the shared locks of their
// occurrence periods, taken in key order, then one statement that reads each
// fact's known schedule, price version in effect and period status, and
// inserts the charges of the facts that can be rated. A fact whose series'
// schedule billing does not know through its occurrence yet is deferred
// (its item error, ScheduleKey); one that occurred before the series' first
// version is quarantined; one whose period is closing or closed is rated
// alone by OnUsageAccepted, late into the next open period.
func (s *Service) OnUsagesAccepted(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, us []events.UsageAccepted) ([]inbox.Outcome, error) {
	n := len(ds)
	arg := db.RateUsagesParams{
		TenantIds: make([]string, n), MeterCodes: make([]string, n), Currencies: make([]string, n),
		Periods: make([]string, n), ChargeIds: make([]uuid.UUID, n),
		EventIds: make([]uuid.UUID, n), UsageEventIds: make([]uuid.UUID, n), UsageIds: make([]uuid.UUID, n),
		Quantities: make([]decimal.Decimal, n), OccurredAts: make([]time.Time, n),
	}
	periods, err := s.occurrencePeriods(ctx, tx, ds, us)
	if err != nil {
		return nil, err
	}
	for i, d := range ds {
		u := us[i]
		in := &d.Envelope
		if in.AggregateType != events.AggregateUsage || in.AggregateID != u.UsageID.String() {
			return nil, inbox.ItemError(i, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
				"UsageAccepted of usage %s is on aggregate %s/%s", u.UsageID, in.AggregateType, in.AggregateID)))
		}
		chargeID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new charge id: %w", err)
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new event id: %w", err)
		}
		arg.TenantIds[i], arg.MeterCodes[i], arg.Currencies[i] = in.TenantID, u.MeterCode, u.Currency
		arg.Periods[i], arg.ChargeIds[i] = periods[i], chargeID
		arg.EventIds[i], arg.UsageEventIds[i], arg.UsageIds[i] = eventID, in.EventID, u.UsageID
		arg.Quantities[i], arg.OccurredAts[i] = u.Quantity, u.OccurredAt
	}
	rows, err := db.RateUsagesLocked(ctx, tx, arg)
	if err != nil {
		return nil, fmt.Errorf("rate %d usage events: %w", n, err)
	}
	if len(rows) != n {
		return nil, fmt.Errorf("rate %d usage events: %d results", n, len(rows))
	}
	outs := make([]inbox.Outcome, n)
	var other []int // rated charges under another model than unit
	for i, row := range rows {
		if row.Known && row.Priced && row.Model != pricing.Unit {
			other = append(other, i)
		}
	}
	pricings, err := versionPricings(ctx, tx, ds, us, rows, other)
	if err != nil {
		return nil, err
	}
	for i, row := range rows {
		in, u := &ds[i].Envelope, us[i]
		if err := unrated(in, u, row.Known, row.Priced); err != nil {
			return nil, inbox.ItemError(i, err)
		}
		switch row.Status {
		case domain.StatusOpen:
			rate := rated{version: row.PriceVersion, unitPrice: row.UnitPrice, pricing: pricings[seriesVersion{in.TenantID, u.MeterCode, u.Currency, row.PriceVersion}]}
			env, err := s.chargeRated(in, u, arg.ChargeIds[i], arg.EventIds[i], rate, arg.Periods[i], false)
			if err != nil {
				return nil, err
			}
			outs[i] = inbox.Outcome{Publish: []inbox.Publication{{Topic: events.Topic(env.EventType), Event: env}}}
		case domain.StatusClosing, domain.StatusClosed:
			// Nothing was written for it: rated alone, late.
			out, err := s.OnUsageAccepted(ctx, tx, ds[i], u)
			if err != nil {
				return nil, inbox.ItemError(i, err)
			}
			outs[i] = out
		default:
			return nil, fmt.Errorf("%w: period %s of %s has status %q", ErrInternal, arg.Periods[i], in.TenantID, row.Status)
		}
	}
	return outs, nil
}

// unrated is the decision on a fact the rating statement did not rate for
// want of a price: nil when it was priced. Not known: the fact waits until
// billing knows the series' schedule through its occurrence. Known but not
// priced: it occurred before the series' first version took effect, which
// usage refuses, so it is quarantined.
func unrated(in *envelope.Envelope, u events.UsageAccepted, known, priced bool) error {
	switch {
	case !known:
		return inbox.DeferUntil(ScheduleKey(in.TenantID, u.MeterCode, u.Currency, u.OccurredAt))
	case !priced:
		return inbox.Permanent(inbox.ReasonNoPriceInEffect, fmt.Errorf(
			"usage %s of %s in %s occurred at %s, before the first price version of the series takes effect",
			u.UsageID, u.MeterCode, u.Currency, u.OccurredAt.Format(time.RFC3339Nano)))
	}
	return nil
}

// rated is the price version a charge was rated at: its unit price (0 under
// the other models) and, under the other models, its pricing.
type rated struct {
	version   int64
	unitPrice decimal.Decimal
	pricing   *pricing.Pricing
}

// seriesVersion names one version of a tenant's price series.
type seriesVersion struct {
	tenant, meter, currency string
	version                 int64
}

// versionPricings reads the pricing of the versions the charges at idx were
// rated at (another model than unit), in one round trip; none when idx is
// empty.
func versionPricings(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, us []events.UsageAccepted,
	rows []db.RateUsagesRow, idx []int) (map[seriesVersion]*pricing.Pricing, error) {
	out := map[seriesVersion]*pricing.Pricing{}
	byTenant := map[string]*db.VersionPricingsParams{}
	for _, i := range idx {
		t := ds[i].Envelope.TenantID
		if byTenant[t] == nil {
			byTenant[t] = &db.VersionPricingsParams{TenantID: t}
		}
		p := byTenant[t]
		p.MeterCodes = append(p.MeterCodes, us[i].MeterCode)
		p.Currencies = append(p.Currencies, us[i].Currency)
		p.Versions = append(p.Versions, rows[i].PriceVersion)
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
			out[seriesVersion{t, v.MeterCode, v.Currency, v.Version}] = &pr
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

// chargeRated is the ChargeRated of a charge rated from usage event in at
// the given price version.
func (s *Service) chargeRated(in *envelope.Envelope, u events.UsageAccepted, chargeID, eventID uuid.UUID,
	rate rated, period string, late bool) (envelope.Envelope, error) {
	charge := events.ChargeRated{
		ChargeID: chargeID, UsageEventID: in.EventID, UsageID: u.UsageID, MeterCode: u.MeterCode,
		Currency: u.Currency, Quantity: u.Quantity, UnitPrice: rate.unitPrice, PriceVersion: rate.version,
		Amount: domain.Amount(u.Quantity, rate.unitPrice), Period: period, Late: late, OccurredAt: u.OccurredAt,
	}
	if rate.pricing != nil && rate.pricing.Model != pricing.Unit {
		charge.Model, charge.Pricing = rate.pricing.Model, rate.pricing
	}
	return events.Caused(in, charge, events.Meta{
		Producer: Producer, TenantID: in.TenantID, AggregateID: chargeID.String(), OccurredAt: s.now(), EventID: eventID,
	})
}

// OnUsageAccepted rates one usage fact: exactly one charge per usage event,
// at the price version in effect at its occurrence, from billing's own
// evidence and only once billing knows the series' schedule through the
// occurrence (deferred until then), into the period of its occurrence
// or, when that period is closing or closed, the earliest open period after
// it (late). The charge is its own aggregate (charge/<id>, version 1) and
// ChargeRated is appended with it: nothing a charge writes is shared with
// another charge, so one tenant's usage is rated by every consumer at once.
// A period's close is kept consistent by the period's advisory lock, held
// shared here and exclusively by the close (see ClosePeriod). One round
// trip in the common case: lock and rate, pipelined; ChargeRated is appended
// by the inbox with the run's decisions (inbox.Outcome.Publish).
func (s *Service) OnUsageAccepted(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, u events.UsageAccepted) (inbox.Outcome, error) {
	in := d.Envelope
	if in.AggregateType != events.AggregateUsage || in.AggregateID != u.UsageID.String() {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"UsageAccepted of usage %s is on aggregate %s/%s", u.UsageID, in.AggregateType, in.AggregateID))
	}
	chargeID, err := uuid.NewV7()
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("new charge id: %w", err)
	}
	// The charge row records the id of the event it emits: the id is made
	// first and given to the envelope.
	eventID, err := uuid.NewV7()
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("new event id: %w", err)
	}
	occurred, err := s.occurrencePeriod(ctx, tx, in.TenantID, u.OccurredAt)
	if err != nil {
		return inbox.Outcome{}, err
	}
	period, late := occurred, false
	for attempt := 1; ; attempt++ {
		row, err := db.RateUsageLocked(ctx, tx, db.RateUsageParams{
			TenantID: in.TenantID, MeterCode: u.MeterCode, Currency: u.Currency,
			Period: period, ChargeID: chargeID, EventID: eventID,
			UsageEventID: in.EventID, UsageID: u.UsageID, Quantity: u.Quantity, Late: late, OccurredAt: u.OccurredAt,
		})
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("rate usage event %s: %w", in.EventID, err)
		}
		if err := unrated(&in, u, row.Known, row.Priced); err != nil {
			return inbox.Outcome{}, err
		}
		switch row.Status {
		case domain.StatusOpen:
			rate := rated{version: row.PriceVersion, unitPrice: row.UnitPrice}
			if row.Model != pricing.Unit {
				prs, err := versionPricings(ctx, tx, []*envelope.Decoded{d}, []events.UsageAccepted{u},
					[]db.RateUsagesRow{{PriceVersion: row.PriceVersion}}, []int{0})
				if err != nil {
					return inbox.Outcome{}, err
				}
				rate.pricing = prs[seriesVersion{in.TenantID, u.MeterCode, u.Currency, row.PriceVersion}]
			}
			env, err := s.chargeRated(&in, u, chargeID, eventID, rate, period, late)
			if err != nil {
				return inbox.Outcome{}, err
			}
			return inbox.Outcome{Publish: []inbox.Publication{{Topic: events.Topic(env.EventType), Event: env}}}, nil
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
