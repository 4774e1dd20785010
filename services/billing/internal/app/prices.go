package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// OnPriceActivated replicates a price version as price evidence (its
// pricing and its dimensions: one entry of the series' price sheet) and raises
// what billing knows of the series' schedule to the event's knownThrough
// (decision 0011). A replay of a version changes nothing. Applying it
// provides the aggregate key of the version, which wakes the series'
// watermarks waiting for it, and the schedule keys of the seconds it makes
// known, which wake the usage waiting for them.
func (a *App) OnPriceActivated(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceActivated) (_ inbox.Outcome, err error) {
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
	if ev.Dimensions, err = dimensionsJSON(p.Dimensions); err != nil {
		return inbox.Outcome{}, err
	}
	ev.DimensionsKey, ev.DimensionCount = dimensionsKey(p.Dimensions), int16(len(p.Dimensions))
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
func (a *App) OnPriceScheduleWatermark(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceScheduleWatermark) (inbox.Outcome, error) {
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

// dimensionsKey is the price_evidence and charge dimensions_key of a
// dimension set: catalog.Key, which text can hold and which orders (in
// byte order, COLLATE "C") as catalog.Choose's tie-break.
func dimensionsKey(dims map[string]string) string { return catalog.Key(dims) }

// dimensionsJSON is a dimension set (or a fact's properties) as the jsonb
// object the tables hold; {} for none.
func dimensionsJSON(m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode dimensions: %w", err)
	}
	return b, nil
}
