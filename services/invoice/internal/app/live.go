package app

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// liveKey is one line of an open invoice's charges: its currency (the
// invoice), meter, price version, price dimensions, unpriced, aggregation
// and unit price, the columns TallyChargeChunk groups by.
type liveKey struct {
	currency, meterCode       string
	priceVersion              int64
	dimensionsKey             string
	unpriced                  bool
	aggregation, unitPriceKey string
}

// valueKey is the line a distinct value of invoice_line_value counts in.
type valueKey struct {
	currency, meterCode string
	priceVersion        int64
	dimensionsKey       string
	unpriced            bool
}

// liveLines computes the charge and unpriced lines of the open invoices
// among rows, by invoice id, each invoice's in ChargeLineSums' order. It
// walks each open period's charges as the close does, in keyset chunks of
// closeChunk charges (TallyChargeChunk), then its unique_count lines'
// distinct values in chunks of as many (TallyValueChunk), summing the
// chunks in memory: every statement reads at most a chunk whatever the
// period's size, so a large open invoice's read stays under
// statement_timeout. The caller's REPEATABLE READ transaction gives the
// chunks one snapshot. With most > 0 it returns ErrTooManyLines as soon as
// the lines are more than most (their count bounds the memory).
func (a *App) liveLines(ctx context.Context, q *db.Queries, rows []db.ListInvoicesRow, most int) (map[uuid.UUID][]db.ChargeLineSumsRow, error) {
	type tp struct{ tenantID, period string }
	open := map[tp][]db.ListInvoicesRow{}
	var order []tp
	for _, r := range rows {
		if r.Status != domain.StatusOpen {
			continue
		}
		k := tp{r.TenantID, r.Period}
		if _, ok := open[k]; !ok {
			order = append(order, k)
		}
		open[k] = append(open[k], r)
	}
	out := map[uuid.UUID][]db.ChargeLineSumsRow{}
	total := 0
	for _, k := range order {
		lines, err := a.walkLive(ctx, q, k.tenantID, k.period, most)
		if err != nil {
			return nil, err
		}
		for _, inv := range open[k] {
			arg := db.ChargeLineSumsParams{TenantID: inv.TenantID, Period: inv.Period, Currency: inv.Currency}
			for key, l := range lines {
				if key.currency != inv.Currency {
					continue
				}
				arg.MeterCodes, arg.PriceVersions = append(arg.MeterCodes, l.MeterCode), append(arg.PriceVersions, l.PriceVersion)
				arg.DimensionsKeys, arg.Unpriceds = append(arg.DimensionsKeys, l.DimensionsKey), append(arg.Unpriceds, l.Unpriced)
				arg.Aggregations, arg.UnitPrices = append(arg.Aggregations, l.Aggregation), append(arg.UnitPrices, l.UnitPrice)
				arg.Quantities, arg.ChargeCounts = append(arg.Quantities, l.Quantity), append(arg.ChargeCounts, l.Charges)
				arg.Amounts, arg.Distincts = append(arg.Amounts, l.Amount), append(arg.Distincts, l.Distinct)
			}
			if len(arg.MeterCodes) == 0 {
				continue
			}
			total += len(arg.MeterCodes)
			if most > 0 && total > most {
				return nil, ErrTooManyLines
			}
			sums, err := q.ChargeLineSums(ctx, arg)
			if err != nil {
				return nil, fmt.Errorf("price the lines of open invoice %s: %w", inv.InvoiceID, err)
			}
			out[inv.InvoiceID] = sums
		}
	}
	return out, nil
}

// walkLive sums a tenant's period's charges by line, chunk by chunk, and
// counts its unique_count lines' distinct values the same way.
func (a *App) walkLive(ctx context.Context, q *db.Queries, tenantID, period string, most int) (map[liveKey]*chargeLine, error) {
	lines := map[liveKey]*chargeLine{}
	afterUsage, afterOrigin := uuid.Nil, uuid.Nil
	for {
		rows, err := q.TallyChargeChunk(ctx, db.TallyChargeChunkParams{TenantID: tenantID, Period: period,
			AfterUsage: afterUsage, AfterOrigin: afterOrigin, ChunkSize: int32(a.closeChunk)})
		if err != nil {
			return nil, fmt.Errorf("read the charges of %s %s after %s: %w", tenantID, period, afterUsage, err)
		}
		var n int64
		for _, r := range rows {
			n += r.Charges
			k := liveKey{r.Currency, r.MeterCode, r.PriceVersion, r.DimensionsKey, r.Unpriced, r.Aggregation, r.UnitPrice.String()}
			l, ok := lines[k]
			if !ok {
				l = &chargeLine{Currency: r.Currency, MeterCode: r.MeterCode, PriceVersion: r.PriceVersion,
					DimensionsKey: r.DimensionsKey, Unpriced: r.Unpriced, Aggregation: r.Aggregation, UnitPrice: r.UnitPrice,
					Quantity: decimal.Zero, Amount: decimal.Zero}
				lines[k] = l
				if most > 0 && len(lines) > most {
					return nil, ErrTooManyLines
				}
			}
			l.Charges += r.Charges
			l.Quantity, l.Amount = l.Quantity.Add(r.Quantity), l.Amount.Add(r.Amount)
			afterUsage, afterOrigin = r.LastUsage, r.LastOrigin
		}
		if a.afterReadChunk != nil {
			a.afterReadChunk("charges", n)
		}
		if n < int64(a.closeChunk) {
			break
		}
	}
	unique := map[valueKey][]*chargeLine{}
	for k, l := range lines {
		if k.aggregation == catalog.UniqueCount {
			vk := valueKey{k.currency, k.meterCode, k.priceVersion, k.dimensionsKey, k.unpriced}
			unique[vk] = append(unique[vk], l)
		}
	}
	if len(unique) == 0 {
		return lines, nil
	}
	p := db.TallyValueChunkParams{TenantID: tenantID, Period: period, ChunkSize: int32(a.closeChunk)}
	for {
		rows, err := q.TallyValueChunk(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("count the distinct values of %s %s: %w", tenantID, period, err)
		}
		var n int64
		for _, r := range rows {
			n += r.N
			for _, l := range unique[valueKey{r.Currency, r.MeterCode, r.PriceVersion, r.DimensionsKey, r.Unpriced}] {
				l.Distinct += r.N
			}
			p.AfterCurrency, p.AfterMeterCode, p.AfterPriceVersion = r.LastCurrency, r.LastMeterCode, r.LastPriceVersion
			p.AfterDimensionsKey, p.AfterUnpriced, p.AfterValue = r.LastDimensionsKey, r.LastUnpriced, r.LastValue
		}
		if a.afterReadChunk != nil {
			a.afterReadChunk("values", n)
		}
		if n < int64(a.closeChunk) {
			return lines, nil
		}
	}
}
