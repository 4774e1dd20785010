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
// pricing and its dimensions: one entry of the series' price sheet),
// records that billing holds the activation's place in its tenant's
// schedule shard, and raises what billing knows of the shard's schedule to
// the event's knownThrough once it holds every activation of the shard up
// to this one (decision 0019). A replay of a version changes nothing.
// Applying it provides the activation's key in its shard, which wakes the
// shard's watermarks waiting for it, and the schedule keys of the seconds
// it makes known, which wake the usage waiting for them.
func (a *App) OnPriceActivated(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceActivated) (_ inbox.Outcome, err error) {
	e := d.Envelope
	if e.AggregateType != events.AggregatePrice || e.AggregateID != events.PriceSeriesID(p.MeterCode, p.Currency) ||
		e.AggregateVersion != p.Version {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"PriceActivated of %s v%d is on aggregate %s/%s v%d", events.PriceSeriesID(p.MeterCode, p.Currency),
			p.Version, e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	var keys []string
	if p.ScheduleSeq > 0 { // events from before the shards prove nothing
		keys, err = proveSchedule(ctx, tx, events.ScheduleShard(e.TenantID), p.ScheduleSeq, p.KnownThrough, true)
		if err != nil {
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
	if _, err = db.New(tx).InsertPriceEvidence(ctx, ev); err != nil {
		return inbox.Outcome{}, fmt.Errorf("insert price evidence: %w", err)
	}
	return inbox.Outcome{Provides: keys}, nil
}

// OnPriceScheduleWatermark raises what billing knows of a schedule shard
// to the watermark's knownThrough, once billing holds the shard's
// activations 1 to the one it names; until then it is deferred, woken by
// the first missing activation's PriceActivated. A watermark lower than
// what billing knows changes nothing. It provides the schedule keys of the
// seconds it makes known.
func (a *App) OnPriceScheduleWatermark(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceScheduleWatermark) (inbox.Outcome, error) {
	e := d.Envelope
	if e.AggregateType != events.AggregatePriceSchedule || e.AggregateVersion != 1 || e.TenantID != events.ScheduleTenant ||
		e.AggregateID != events.PriceScheduleID(p.Shard, p.KnownThrough) {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"PriceScheduleWatermark of shard %d through %s is on aggregate %s/%s/%s v%d", p.Shard,
			p.KnownThrough.Format(time.RFC3339Nano), e.TenantID, e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	if p.Shards != events.ScheduleShards {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"PriceScheduleWatermark of shard %d of %d shards: billing's tenants are in %d", p.Shard, p.Shards, events.ScheduleShards))
	}
	keys, err := proveSchedule(ctx, tx, p.Shard, p.Seq, p.KnownThrough, false)
	if err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Outcome{Provides: keys}, nil
}

// proveSchedule applies one proof of a shard's schedule, "activations 1 to
// seq are every version taking effect at or before through", and returns
// the keys it provides. The shard's row is taken first (lockSchedule). An
// activation (activation true) records its own seq and provides its key
// (ScheduleSeqKey); its proof, when billing lacks an earlier activation,
// is left to a later watermark. A watermark missing an activation waits
// for the first missing one. A proof billing can use raises the shard's
// known schedule and provides the keys of the seconds that became known
// and scheduleFreeKey.
func proveSchedule(ctx context.Context, tx pgx.Tx, shard int32, seq int64, through time.Time, activation bool) ([]string, error) {
	q := db.New(tx)
	row, err := q.TryLockScheduleShard(ctx, shard)
	if err != nil {
		return nil, fmt.Errorf("lock the schedule shard: %w", err)
	}
	if row.Busy {
		return nil, inbox.DeferUntil(scheduleFreeKey(shard))
	}
	free := scheduleFreeKey(shard)
	keys := []string{free}
	if activation {
		keys = append(keys, ScheduleSeqKey(shard, seq))
		if seq > row.ContiguousSeq {
			if err := q.RecordScheduleSeq(ctx, db.RecordScheduleSeqParams{Shard: shard, Seq: seq}); err != nil {
				return nil, fmt.Errorf("record the schedule activation: %w", err)
			}
		}
		if through.IsZero() {
			return keys, nil
		}
	}
	if seq > row.ContiguousSeq {
		missing, err := q.FirstMissingScheduleSeq(ctx, db.FirstMissingScheduleSeqParams{After: row.ContiguousSeq, Through: seq, Shard: shard})
		if err != nil {
			return nil, fmt.Errorf("read the schedule activations: %w", err)
		}
		switch {
		case missing != 0 && activation:
			return keys, nil
		case missing != 0:
			return nil, inbox.DeferUntil(ScheduleSeqKey(shard, missing))
		}
	}
	if err := q.RaiseScheduleShard(ctx, db.RaiseScheduleShardParams{Shard: shard, Seq: seq, KnownThrough: through}); err != nil {
		return nil, fmt.Errorf("raise the known schedule: %w", err)
	}
	if !through.After(row.KnownThrough) {
		return keys, nil
	}
	var prev *time.Time
	if row.KnownThrough.After(time.Unix(0, 0)) { // epoch: nothing known
		prev = &row.KnownThrough
	}
	return append(ScheduleKeys(shard, prev, through), keys...), nil
}

// scheduleFreeKey is provided by every transaction that held a shard's
// schedule row (see proveSchedule).
func scheduleFreeKey(shard int32) string {
	return "schedule-free/" + strconv.Itoa(int(shard))
}

// ScheduleSeqKey is provided when billing records activation seq of a
// shard: a watermark naming it waits for it.
func ScheduleSeqKey(shard int32, seq int64) string {
	return "schedule-seq/" + strconv.Itoa(int(shard)) + "@" + strconv.FormatInt(seq, 10)
}

// maxScheduleKeys bounds the keys one rise of the known schedule provides:
// usage waiting on older seconds (billing was far behind) is decided again
// by the inbox's sweep.
const maxScheduleKeys = 3600

// ScheduleKey is the wait key of usage of a tenant in shard that occurred
// at `at` while billing did not know the shard's schedule through it: one
// key per second of occurrence, so a rise of the known schedule wakes
// exactly the seconds it covers.
func ScheduleKey(shard int32, at time.Time) string {
	return scheduleKey(shard, floorSecond(at))
}

func scheduleKey(shard int32, second int64) string {
	return "schedule/" + strconv.Itoa(int(shard)) + "@" + strconv.FormatInt(second, 10)
}

// ScheduleKeys are the keys of the seconds a rise of the known schedule
// from prev (nil: nothing known) to through makes wholly known: from prev's
// second, which the rise to prev knew only in part (or not at all), to the
// last second before through's, at most maxScheduleKeys of the latest.
// Through's own second, known only in part, is provided by the rise that
// completes it: usage of it woken now could wait again, and a schedule
// renewed many times a second would wake the same facts each time.
func ScheduleKeys(shard int32, prev *time.Time, through time.Time) []string {
	last := floorSecond(through) - 1
	first := last - maxScheduleKeys + 1
	if prev != nil {
		first = max(first, floorSecond(*prev))
	}
	if first > last {
		return nil
	}
	keys := make([]string, 0, last-first+1)
	for sec := first; sec <= last; sec++ {
		keys = append(keys, scheduleKey(shard, sec))
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
