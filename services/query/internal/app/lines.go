package app

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// priceLines sets the "charged" delta of each charge of ds priced by its
// line (domain.LinePriced: a version under graduated, volume or package
// pricing, decision 0012, or any priced charge of a max, latest or
// unique_count meter: the charge has no amount of its own) to what it adds
// to its line's price. It locks the batch's lines (charge_line, in key order)
// until the transaction ends, so the charges of one line are counted one
// after another whatever the consumers, counts each charge into its line's
// aggregation (domain.LineState; a unique_count line's values in
// charge_line_value) and stores the lines' new state: the deltas of a line
// sum to its pricing over its quantity under the meter's aggregation,
// exactly what invoice and billing's estimate show. Unit charges of sum and
// count meters keep their own amount; unpriced charges are 0. A batch rolled
// back (a duplicate, a failure) takes its additions with it.
func priceLines(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, deltas []decimal.Decimal) error {
	type item struct {
		index  int
		charge events.ChargeRated
	}
	type line struct {
		pricing pricing.Pricing
		items   []item
		state   domain.LineState
		locked  bool
	}
	lines := map[domain.ChargeLine]*line{}
	for i, d := range ds {
		c, ok := d.Payload.(events.ChargeRated)
		if !ok {
			continue
		}
		key, p, ok := domain.LinePriced(d.Envelope.TenantID, c)
		if !ok {
			continue
		}
		l := lines[key]
		if l == nil {
			l = &line{pricing: p}
			lines[key] = l
		}
		l.items = append(l.items, item{i, c})
	}
	if len(lines) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(lines), compareLines)
	q := db.New(tx)
	var lp db.LockChargeLinesParams
	for _, k := range keys {
		lp.TenantIds, lp.Periods, lp.Currencies = append(lp.TenantIds, k.TenantID), append(lp.Periods, k.Period), append(lp.Currencies, k.Currency)
		lp.MeterCodes, lp.PriceVersions = append(lp.MeterCodes, k.MeterCode), append(lp.PriceVersions, k.PriceVersion)
		lp.DimensionsKeys = append(lp.DimensionsKeys, k.DimensionsKey)
	}
	rows, err := q.LockChargeLines(ctx, lp)
	if err != nil {
		return fmt.Errorf("lock %d charge lines: %w", len(keys), err)
	}
	for _, r := range rows {
		l := lines[domain.ChargeLine{TenantID: r.TenantID, Period: r.Period, Currency: r.Currency, MeterCode: r.MeterCode,
			PriceVersion: r.PriceVersion, DimensionsKey: r.DimensionsKey}]
		if l == nil {
			return fmt.Errorf("charge line %s %s %s %s %d returned but not asked", r.TenantID, r.Period, r.Currency, r.MeterCode, r.PriceVersion)
		}
		l.locked, l.state.Quantity = true, r.Quantity
		if r.LatestAt != nil {
			l.state.Latest = &catalog.Observation{Quantity: r.Quantity, OccurredAt: *r.LatestAt,
				SourceSystem: r.LatestSourceSystem, SourceEventID: r.LatestSourceEventID}
		}
	}
	fresh, err := addLineValues(ctx, q, keys, func(k domain.ChargeLine) []events.ChargeRated {
		var cs []events.ChargeRated
		for _, it := range lines[k].items {
			cs = append(cs, it.charge)
		}
		return cs
	})
	if err != nil {
		return err
	}
	var sp db.SetChargeLinesParams
	for _, k := range keys {
		l := lines[k]
		if !l.locked {
			return fmt.Errorf("charge line %+v was not locked", k)
		}
		for _, it := range l.items {
			v := lineValue{k, it.charge.Value}
			deltas[it.index] = l.state.Add(l.pricing, it.charge, fresh[v])
			delete(fresh, v) // a value twice in the batch is new once
		}
		sp.TenantIds, sp.Periods, sp.Currencies = append(sp.TenantIds, k.TenantID), append(sp.Periods, k.Period), append(sp.Currencies, k.Currency)
		sp.MeterCodes, sp.PriceVersions = append(sp.MeterCodes, k.MeterCode), append(sp.PriceVersions, k.PriceVersion)
		sp.DimensionsKeys, sp.Quantities = append(sp.DimensionsKeys, k.DimensionsKey), append(sp.Quantities, l.state.Quantity)
		latest := catalog.Observation{}
		if l.state.Latest != nil {
			latest = *l.state.Latest
		}
		sp.LatestAts, sp.LatestSourceSystems = append(sp.LatestAts, latest.OccurredAt), append(sp.LatestSourceSystems, latest.SourceSystem)
		sp.LatestSourceEventIds = append(sp.LatestSourceEventIds, latest.SourceEventID)
	}
	if err := q.SetChargeLines(ctx, sp); err != nil {
		return fmt.Errorf("store %d charge lines: %w", len(keys), err)
	}
	return nil
}

// lineValue is one value of a unique_count line.
type lineValue struct {
	line  domain.ChargeLine
	value string
}

// addLineValues adds the values of the unique_count charges of the locked
// lines to their sets and returns those that were new.
func addLineValues(ctx context.Context, q *db.Queries, keys []domain.ChargeLine, charges func(domain.ChargeLine) []events.ChargeRated) (map[lineValue]bool, error) {
	var p db.AddChargeLineValuesParams
	for _, k := range keys {
		for _, c := range charges(k) {
			if c.Aggregation != catalog.UniqueCount {
				continue
			}
			p.TenantIds, p.Periods, p.Currencies = append(p.TenantIds, k.TenantID), append(p.Periods, k.Period), append(p.Currencies, k.Currency)
			p.MeterCodes, p.PriceVersions = append(p.MeterCodes, k.MeterCode), append(p.PriceVersions, k.PriceVersion)
			p.DimensionsKeys, p.Values = append(p.DimensionsKeys, k.DimensionsKey), append(p.Values, c.Value)
		}
	}
	fresh := map[lineValue]bool{}
	if len(p.Values) == 0 {
		return fresh, nil
	}
	rows, err := q.AddChargeLineValues(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("add %d values to unique_count lines: %w", len(p.Values), err)
	}
	for _, r := range rows {
		fresh[lineValue{domain.ChargeLine{TenantID: r.TenantID, Period: r.Period, Currency: r.Currency, MeterCode: r.MeterCode,
			PriceVersion: r.PriceVersion, DimensionsKey: r.DimensionsKey}, r.Value}] = true
	}
	return fresh, nil
}

func compareLines(a, b domain.ChargeLine) int {
	return cmp.Or(cmp.Compare(a.TenantID, b.TenantID), cmp.Compare(a.Period, b.Period), cmp.Compare(a.Currency, b.Currency),
		cmp.Compare(a.MeterCode, b.MeterCode), cmp.Compare(a.PriceVersion, b.PriceVersion),
		cmp.Compare(a.DimensionsKey, b.DimensionsKey))
}
