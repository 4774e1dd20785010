package app

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// priceLines sets the "charged" delta of each charge of ds priced by its
// line (a version under graduated, volume or package pricing: the charge
// has no amount of its own, decision 0012) to what it adds to its line's
// price. It adds the batch's quantities to the lines' rows (charge_line)
// in one statement, which locks the rows until the transaction ends, so
// the charges of one line are priced one after another whatever the
// consumers: the deltas of a line sum to its pricing over its quantity,
// exactly what invoice and billing's estimate show. Unit charges keep their
// own amount. A batch rolled back (a duplicate, a failure) takes its
// additions with it.
func priceLines(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, deltas []decimal.Decimal) error {
	type item struct {
		index int
		qty   decimal.Decimal
	}
	type line struct {
		pricing pricing.Pricing
		items   []item
		sum     decimal.Decimal
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
		l.items = append(l.items, item{i, c.Quantity})
		l.sum = l.sum.Add(c.Quantity)
	}
	if len(lines) == 0 {
		return nil
	}
	keys := slices.Collect(maps.Keys(lines))
	var p db.AddChargeLineQuantitiesParams
	for _, k := range keys {
		p.TenantIds, p.Periods, p.Currencies = append(p.TenantIds, k.TenantID), append(p.Periods, k.Period), append(p.Currencies, k.Currency)
		p.MeterCodes, p.PriceVersions = append(p.MeterCodes, k.MeterCode), append(p.PriceVersions, k.PriceVersion)
		p.Quantities = append(p.Quantities, lines[k].sum)
	}
	rows, err := db.New(tx).AddChargeLineQuantities(ctx, p)
	if err != nil {
		return fmt.Errorf("add the quantities of %d charge lines: %w", len(keys), err)
	}
	if len(rows) != len(keys) {
		return fmt.Errorf("add the quantities of %d charge lines: %d rows returned", len(keys), len(rows))
	}
	for _, r := range rows {
		l := lines[domain.ChargeLine{TenantID: r.TenantID, Period: r.Period, Currency: r.Currency, MeterCode: r.MeterCode,
			PriceVersion: r.PriceVersion}]
		if l == nil {
			return fmt.Errorf("charge line %s %s %s %s %d returned but not added", r.TenantID, r.Period, r.Currency, r.MeterCode, r.PriceVersion)
		}
		before := r.Quantity.Sub(l.sum)
		for _, it := range l.items {
			deltas[it.index] = domain.LineDelta(l.pricing, before, it.qty)
			before = before.Add(it.qty)
		}
	}
	return nil
}
