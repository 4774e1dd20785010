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

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/meter/internal/db"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

// Price is one immutable price version as the API shows it: its model and
// that model's fields (unitPrice under unit; tiers under graduated and
// volume; packageSize and packagePrice under package).
type Price struct {
	PriceID      uuid.UUID        `json:"priceId"`
	TenantID     string           `json:"tenantId"`
	MeterCode    string           `json:"meterCode"`
	Currency     string           `json:"currency"`
	Model        string           `json:"model"`
	UnitPrice    *decimal.Decimal `json:"unitPrice,omitempty"`
	Tiers        []pricing.Tier   `json:"tiers,omitempty"`
	PackageSize  *decimal.Decimal `json:"packageSize,omitempty"`
	PackagePrice *decimal.Decimal `json:"packagePrice,omitempty"`
	// Dimensions are the property values the version applies to; absent
	// for the series' default.
	Dimensions  map[string]string `json:"dimensions,omitempty"`
	EffectiveAt time.Time         `json:"effectiveAt"`
	Version     int64             `json:"version"`
	EventID     uuid.UUID         `json:"eventId"`
	ActivatedAt time.Time         `json:"activatedAt"`
}

// ActivatePrice is the command to activate the next version of a price
// series.
type ActivatePrice struct {
	TenantID      string
	Activation    domain.Activation
	CorrelationID string
	// Actor is who sent the command (the bearer token's subject), recorded
	// in the PriceActivated event and the price row; required.
	Actor string
}

// ErrNoActor is returned for a command without an actor: every
// money-changing command records who sent it.
var ErrNoActor = errors.New("command has no actor")

// InTx runs fn in a transaction of the App's database, committed when fn
// returns nil: the transaction an idempotent command runs in, with its
// Idempotency-Key claimed and its reply saved by the caller (httpapi,
// pkg/idempotency).
func (a *App) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, a.pool, fn)
}

// ActivatePrice activates the next version of a price series in tx: under
// the series lock, the schedule check, the catalog meter (implied when the
// code is not in the catalog) and the dimension check, the immutable
// version and its PriceActivated (after the implied meter's MeterDefined)
// in the outbox. On an error (a *domain.Error for a broken rule) the caller
// must not commit tx (InTx does not), so nothing is written.
func (a *App) ActivatePrice(ctx context.Context, tx pgx.Tx, cmd ActivatePrice) (Price, error) {
	if cmd.Actor == "" {
		return Price{}, ErrNoActor
	}
	return a.activate(ctx, tx, cmd)
}

func (a *App) activate(ctx context.Context, tx pgx.Tx, cmd ActivatePrice) (Price, error) {
	q := db.New(tx)
	act := cmd.Activation
	series, err := q.LockPriceSeries(ctx, db.LockPriceSeriesParams{
		TenantID: cmd.TenantID, MeterCode: act.MeterCode, Currency: act.Currency,
	})
	if err != nil {
		return Price{}, fmt.Errorf("lock price series: %w", err)
	}
	// The tenant's activations one at a time, so its limits are counted
	// against what committed; after the series' row, before the shard's.
	if err := q.LockTenantSeries(ctx, cmd.TenantID); err != nil {
		return Price{}, fmt.Errorf("lock the series of %s: %w", cmd.TenantID, err)
	}
	if series.LastVersion == 0 { // a new series: within the tenant's limit
		if err := a.checkSeriesLimit(ctx, q, cmd.TenantID); err != nil {
			return Price{}, err
		}
	}
	// Then the tenant's schedule shard (decision 0019), always after the
	// series: its watermark is the one this version must take effect
	// after, and the activation takes the shard's next number.
	shard := events.ScheduleShard(cmd.TenantID)
	sched, err := q.LockScheduleShard(ctx, shard)
	if err != nil {
		return Price{}, fmt.Errorf("lock schedule shard: %w", err)
	}
	// Read the clock once the series and the shard are ours, so activation
	// times follow versions.
	activatedAt := domain.Instant(a.now())
	effectiveAt, err := act.Schedule(activatedAt, series.LastEffectiveAt, sched.KnownThrough)
	if err != nil {
		return Price{}, err
	}
	knownThrough := domain.Watermark(activatedAt, a.lead, sched.KnownThrough)
	seq := sched.LastSeq + 1
	// The price's catalog meter, implied (and published) here when the code
	// is not in the catalog; its dimensions are checked against it and
	// against the dimension sets the series names so far, read under the
	// series lock.
	meter, defined, err := a.meterFor(ctx, tx, act.MeterCode, activatedAt, cmd.Actor, cmd.CorrelationID)
	if err != nil {
		return Price{}, err
	}
	sheet, err := seriesDimensions(ctx, q, cmd.TenantID, act.MeterCode, act.Currency)
	if err != nil {
		return Price{}, err
	}
	if err := domain.CheckDimensionPrice(meter, act.Dimensions, sheet); err != nil {
		return Price{}, err
	}
	dims, err := dimensionsJSON(act.Dimensions)
	if err != nil {
		return Price{}, err
	}
	if err := a.checkPriceLimits(ctx, q, cmd.TenantID, act, dims, effectiveAt); err != nil {
		return Price{}, err
	}
	version := series.LastVersion + 1
	priceID, err := uuid.NewV7()
	if err != nil {
		return Price{}, fmt.Errorf("new price id: %w", err)
	}
	env, err := events.New(events.PriceActivated{
		PriceID:      priceID,
		MeterCode:    act.MeterCode,
		Currency:     act.Currency,
		UnitPrice:    unitPriceOf(act.Pricing),
		Model:        act.Pricing.Model,
		Tiers:        act.Pricing.Tiers,
		PackageSize:  act.Pricing.PackageSize,
		PackagePrice: act.Pricing.PackagePrice,
		EffectiveAt:  effectiveAt,
		Version:      version,
		ScheduleSeq:  seq,
		KnownThrough: knownThrough,
		Actor:        cmd.Actor,
		Dimensions:   act.Dimensions,
	}, events.Meta{
		Producer: Producer, TenantID: cmd.TenantID, AggregateID: events.PriceSeriesID(act.MeterCode, act.Currency),
		AggregateVersion: version, OccurredAt: activatedAt, CorrelationID: cmd.CorrelationID,
	})
	if err != nil {
		return Price{}, err
	}
	tiers, err := tiersJSON(act.Pricing.Tiers)
	if err != nil {
		return Price{}, err
	}
	if err := q.InsertPrice(ctx, db.InsertPriceParams{
		PriceID: priceID, TenantID: cmd.TenantID, MeterCode: act.MeterCode, Currency: act.Currency,
		Version: version, Model: act.Pricing.Model, UnitPrice: nullDecimal(act.Pricing.UnitPrice), Tiers: tiers,
		PackageSize: nullDecimal(act.Pricing.PackageSize), PackagePrice: nullDecimal(act.Pricing.PackagePrice),
		EffectiveAt: effectiveAt, ActivatedAt: activatedAt, EventID: env.EventID, Actor: cmd.Actor, Dimensions: dims,
		ScheduleSeq: seq,
	}); err != nil {
		return Price{}, fmt.Errorf("insert price version: %w", err)
	}
	n, err := q.AdvancePriceSeries(ctx, db.AdvancePriceSeriesParams{
		Version: version, EffectiveAt: &effectiveAt,
		TenantID: cmd.TenantID, MeterCode: act.MeterCode, Currency: act.Currency,
	})
	if err != nil {
		return Price{}, fmt.Errorf("advance price series: %w", err)
	}
	if n != 1 {
		return Price{}, errors.New("advance price series: the series moved while locked")
	}
	n, err = q.AdvanceScheduleShard(ctx, db.AdvanceScheduleShardParams{Seq: seq, KnownThrough: knownThrough, Shard: shard})
	if err != nil {
		return Price{}, fmt.Errorf("advance schedule shard: %w", err)
	}
	if n != 1 {
		return Price{}, errors.New("advance schedule shard: the shard moved while locked")
	}
	evs := []envelope.Envelope{env}
	if defined != nil {
		evs = []envelope.Envelope{*defined, env} // the meter before its first price
	}
	if err := events.Append(ctx, tx, evs...); err != nil {
		return Price{}, err
	}
	return Price{
		PriceID: priceID, TenantID: cmd.TenantID, MeterCode: act.MeterCode, Currency: act.Currency,
		Model: act.Pricing.Model, UnitPrice: act.Pricing.UnitPrice, Tiers: act.Pricing.Tiers, Dimensions: act.Dimensions,
		PackageSize: act.Pricing.PackageSize, PackagePrice: act.Pricing.PackagePrice,
		EffectiveAt: effectiveAt, Version: version, EventID: env.EventID, ActivatedAt: activatedAt,
	}, nil
}

// unitPriceOf is the unit price a PriceActivated carries: the unit price
// under unit pricing, zero under the others.
func unitPriceOf(p pricing.Pricing) decimal.Decimal {
	if p.UnitPrice == nil {
		return decimal.Zero
	}
	return *p.UnitPrice
}

func nullDecimal(d *decimal.Decimal) decimal.NullDecimal {
	if d == nil {
		return decimal.NullDecimal{}
	}
	return decimal.NullDecimal{Decimal: *d, Valid: true}
}

func ptrDecimal(d decimal.NullDecimal) *decimal.Decimal {
	if !d.Valid {
		return nil
	}
	return &d.Decimal
}

// tiersJSON is the tiers column: nil (NULL) without tiers.
func tiersJSON(ts []pricing.Tier) ([]byte, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(ts)
	if err != nil {
		return nil, fmt.Errorf("encode tiers: %w", err)
	}
	return b, nil
}

// dimensionsJSON is the dimensions column: {} for none.
func dimensionsJSON(d map[string]string) ([]byte, error) {
	if len(d) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode dimensions: %w", err)
	}
	return b, nil
}

// dimensionsOf reads the dimensions column: nil for none.
func dimensionsOf(raw []byte) (map[string]string, error) {
	var d map[string]string
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("decode dimensions: %w", err)
	}
	if len(d) == 0 {
		return nil, nil
	}
	return d, nil
}

// seriesDimensions are the dimension sets a series' versions name.
func seriesDimensions(ctx context.Context, q *db.Queries, tenantID, meterCode, currency string) ([]map[string]string, error) {
	rows, err := q.SeriesDimensions(ctx, db.SeriesDimensionsParams{TenantID: tenantID, MeterCode: meterCode, Currency: currency})
	if err != nil {
		return nil, fmt.Errorf("read the dimension sets of the series: %w", err)
	}
	out := make([]map[string]string, 0, len(rows))
	for _, r := range rows {
		d, err := dimensionsOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// PriceKey is a price version's position in the list order: meter code,
// currency, version. The zero PriceKey is before every version.
type PriceKey struct {
	MeterCode string
	Currency  string
	Version   int64
}

// Key is p's position in the list order.
func (p Price) Key() PriceKey {
	return PriceKey{MeterCode: p.MeterCode, Currency: p.Currency, Version: p.Version}
}

// ListPrices selects a page of a tenant's price versions.
type ListPrices struct {
	TenantID string
	// MeterCode, when not empty, lists that meter's versions only; After is
	// then of that meter (or zero).
	MeterCode string
	// After is the position the page starts after.
	After PriceKey
	// Limit is how many versions to read at most.
	Limit int32
}

// ListPrices reads the versions after l.After in (meter code, currency,
// version) order, at most l.Limit of them.
func (a *App) ListPrices(ctx context.Context, l ListPrices) ([]Price, error) {
	q := db.New(a.pool)
	var rows []db.ListPricesRow
	var err error
	if l.MeterCode == "" {
		rows, err = q.ListPrices(ctx, db.ListPricesParams{TenantID: l.TenantID, AfterMeterCode: l.After.MeterCode,
			AfterCurrency: l.After.Currency, AfterVersion: l.After.Version, MaxRows: l.Limit})
	} else {
		var meterRows []db.ListMeterPricesRow
		meterRows, err = q.ListMeterPrices(ctx, db.ListMeterPricesParams{TenantID: l.TenantID, MeterCode: l.MeterCode,
			AfterCurrency: l.After.Currency, AfterVersion: l.After.Version, MaxRows: l.Limit})
		for _, r := range meterRows {
			rows = append(rows, db.ListPricesRow(r))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list prices: %w", err)
	}
	out := make([]Price, len(rows))
	for i, r := range rows {
		out[i] = Price{
			PriceID: r.PriceID, TenantID: r.TenantID, MeterCode: r.MeterCode, Currency: r.Currency,
			Model: r.Model, UnitPrice: ptrDecimal(r.UnitPrice), PackageSize: ptrDecimal(r.PackageSize),
			PackagePrice: ptrDecimal(r.PackagePrice),
			EffectiveAt:  r.EffectiveAt.UTC(), Version: r.Version, EventID: r.EventID, ActivatedAt: r.ActivatedAt.UTC(),
		}
		if len(r.Tiers) > 0 {
			if err := json.Unmarshal(r.Tiers, &out[i].Tiers); err != nil {
				return nil, fmt.Errorf("decode tiers of price %s: %w", r.PriceID, err)
			}
		}
		if out[i].Dimensions, err = dimensionsOf(r.Dimensions); err != nil {
			return nil, fmt.Errorf("price %s: %w", r.PriceID, err)
		}
	}
	return out, nil
}

// checkSeriesLimit refuses a new series past Config.MaxSeries, counted
// under the tenant's lock (the new one, inserted by LockPriceSeries,
// included).
func (a *App) checkSeriesLimit(ctx context.Context, q *db.Queries, tenantID string) error {
	n, err := q.CountTenantSeries(ctx, db.CountTenantSeriesParams{TenantID: tenantID, Most: int32(a.cfg.MaxSeries + 1)})
	if err != nil {
		return fmt.Errorf("count the series of %s: %w", tenantID, err)
	}
	if n > int64(a.cfg.MaxSeries) {
		return domain.SeriesLimitExceeded(tenantID, a.cfg.MaxSeries)
	}
	return nil
}

// checkPriceLimits refuses, under the tenant's lock, a version whose
// dimension set would be the tenant's price entry past Config.MaxEntries,
// or that would be one of more than Config.MaxMonthlyVersions of the
// tenant's versions taking effect in the UTC month of effectiveAt. Both
// bound the lines of a tenant's period (decision 0014): at most one line per
// entry in effect at its start and one per version taking effect in it,
// and a period, a month in the tenant's zone, overlaps at most two UTC
// months. The new entry, recorded here, is undone with the transaction
// when the activation is refused.
func (a *App) checkPriceLimits(ctx context.Context, q *db.Queries, tenantID string, act domain.Activation, dims []byte, effectiveAt time.Time) error {
	added, err := q.AddPriceEntry(ctx, db.AddPriceEntryParams{
		TenantID: tenantID, MeterCode: act.MeterCode, Currency: act.Currency, Dimensions: dims,
	})
	if err != nil {
		return fmt.Errorf("record the price entry: %w", err)
	}
	if added == 1 {
		n, err := q.CountTenantEntries(ctx, db.CountTenantEntriesParams{TenantID: tenantID, Most: int32(a.cfg.MaxEntries + 1)})
		if err != nil {
			return fmt.Errorf("count the price entries of %s: %w", tenantID, err)
		}
		if n > int64(a.cfg.MaxEntries) {
			return domain.EntryLimitExceeded(tenantID, a.cfg.MaxEntries)
		}
	}
	from, until := utcMonth(effectiveAt)
	n, err := q.CountTenantVersionsIn(ctx, db.CountTenantVersionsInParams{
		TenantID: tenantID, FromAt: from, UntilAt: until, Most: int32(a.cfg.MaxMonthlyVersions),
	})
	if err != nil {
		return fmt.Errorf("count the price versions of %s: %w", tenantID, err)
	}
	if n >= int64(a.cfg.MaxMonthlyVersions) {
		return domain.MonthlyVersionLimitExceeded(tenantID, a.cfg.MaxMonthlyVersions, from.Format("2006-01"))
	}
	return nil
}

// utcMonth is the UTC month of t: [from, until).
func utcMonth(t time.Time) (from, until time.Time) {
	y, m, _ := t.UTC().Date()
	from = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return from, from.AddDate(0, 1, 0)
}
