package app

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// Line is one of a period's lines (what an invoice line will be): its
// charges of one meter, currency, plan, price version and price
// dimensions (the unpriced ones one line per meter and currency), with
// the line's quantity by its meter's aggregation, the sum of the charges'
// own amounts and the version's pricing.
type Line struct {
	MeterCode     string
	Currency      string
	PlanCode      string
	PriceVersion  int64
	DimensionsKey string
	Dimensions    []byte
	Unpriced      bool
	Aggregation   string
	Charges       int64
	Quantity      decimal.Decimal
	Amount        decimal.Decimal
	Model         string
	UnitPrice     decimal.Decimal
	Tiers         []byte
	PackageSize   decimal.Decimal
	PackagePrice  decimal.Decimal
}

// lineKey is what charges of one line share.
type lineKey struct {
	MeterCode     string
	Currency      string
	PlanCode      string
	PriceVersion  int64
	DimensionsKey string
	Unpriced      bool
	Aggregation   string
}

// lineSums are a line's running sums over the charges walked so far.
type lineSums struct {
	Dimensions     string
	Charges        int64
	Total          decimal.Decimal
	Peak           decimal.Decimal
	Amount         decimal.Decimal
	Digest         decimal.Decimal
	DistinctValues int64
	// The latest charge (latest lines): by occurrence, ties to the larger
	// (source system, source event id) in byte order (catalog's order).
	HasLatest bool
	Latest    catalog.Observation
}

// lineValue is a distinct value of a unique_count line seen in a chunk.
type lineValue struct {
	key   lineKey
	value string
}

// valueSet adds a chunk's distinct values to the set of values the walk has
// seen and returns how many of them were new, per line: close_value for a
// close (closeValues), whose chunks are transactions of their own.
type valueSet func(ctx context.Context, vals []lineValue) (map[lineKey]int64, error)

// periodTally is a period's lines: the close's running tally while its
// charges are walked chunk by chunk (ChargeChunkLines), persisted in
// close_line between its chunks, or a read's, summed from the lines'
// parts (partLines). add is the one definition of adding a chunk to it.
type periodTally struct {
	sums    map[lineKey]*lineSums
	changed map[lineKey]bool
}

func newPeriodTally() *periodTally {
	return &periodTally{sums: map[lineKey]*lineSums{}, changed: map[lineKey]bool{}}
}

// add adds a chunk's lines to the tally: counts, sums and digests add up,
// the peak and the latest charge are the larger of the two, the distinct
// values count the values seen new to the walk (seen).
func (t *periodTally) add(ctx context.Context, rows []db.ChargeChunkLinesRow, seen valueSet) error {
	var vals []lineValue
	for _, r := range rows {
		k := lineKey{MeterCode: r.MeterCode, Currency: r.Currency, PlanCode: r.PlanCode, PriceVersion: r.PriceVersion,
			DimensionsKey: r.DimensionsKey, Unpriced: r.Unpriced, Aggregation: r.Aggregation}
		in := lineSums{Dimensions: r.Dimensions, Charges: r.Charges, Total: r.Total, Peak: r.Peak, Amount: r.Amount,
			Digest: r.Digest, HasLatest: r.HasLatest, Latest: catalog.Observation{Quantity: r.LatestQuantity,
				OccurredAt: r.LatestAt, SourceSystem: r.LatestSystem, SourceEventID: r.LatestSource}}
		for _, v := range r.Vals {
			vals = append(vals, lineValue{key: k, value: v})
		}
		t.changed[k] = true
		s, ok := t.sums[k]
		if !ok {
			t.sums[k] = &in
			continue
		}
		s.Dimensions = min(s.Dimensions, in.Dimensions)
		s.Charges += in.Charges
		s.Total = s.Total.Add(in.Total)
		s.Peak = decimal.Max(s.Peak, in.Peak)
		s.Amount = s.Amount.Add(in.Amount)
		s.Digest = s.Digest.Add(in.Digest)
		if in.HasLatest && (!s.HasLatest || in.Latest.After(s.Latest)) {
			s.HasLatest, s.Latest = true, in.Latest
		}
	}
	if len(vals) == 0 {
		return nil
	}
	fresh, err := seen(ctx, vals)
	if err != nil {
		return err
	}
	for k, n := range fresh {
		s, ok := t.sums[k]
		if !ok {
			return fmt.Errorf("%w: a new value of line %+v outside the chunk", ErrInternal, k)
		}
		s.DistinctValues += n
	}
	return nil
}

// lines are the tally's lines, unpriced, in (meter, currency, plan, price
// version, price dimensions) order, each with its quantity by its meter's
// aggregation.
func (t *periodTally) lines() []Line {
	out := make([]Line, 0, len(t.sums))
	for k, s := range t.sums {
		q := s.Total
		switch k.Aggregation {
		case catalog.Count:
			q = decimal.NewFromInt(s.Charges)
		case catalog.Max:
			q = s.Peak
		case catalog.Latest:
			q = s.Latest.Quantity
		case catalog.UniqueCount:
			q = decimal.NewFromInt(s.DistinctValues)
		}
		out = append(out, Line{MeterCode: k.MeterCode, Currency: k.Currency, PlanCode: k.PlanCode,
			PriceVersion: k.PriceVersion, DimensionsKey: k.DimensionsKey, Dimensions: []byte(s.Dimensions),
			Unpriced: k.Unpriced, Aggregation: k.Aggregation, Charges: s.Charges, Quantity: q, Amount: s.Amount})
	}
	slices.SortFunc(out, func(a, b Line) int {
		return cmp.Or(cmp.Compare(a.MeterCode, b.MeterCode), cmp.Compare(a.Currency, b.Currency),
			cmp.Compare(a.PlanCode, b.PlanCode), cmp.Compare(a.PriceVersion, b.PriceVersion),
			cmp.Compare(a.DimensionsKey, b.DimensionsKey), cmp.Compare(boolInt(a.Unpriced), boolInt(b.Unpriced)),
			cmp.Compare(a.Aggregation, b.Aggregation))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// priceLines fills in each line's pricing (LinePricings, one probe per
// line).
func priceLines(ctx context.Context, q *db.Queries, tenantID string, lines []Line) error {
	if len(lines) == 0 {
		return nil
	}
	arg := db.LinePricingsParams{TenantID: tenantID}
	for _, l := range lines {
		arg.MeterCodes = append(arg.MeterCodes, l.MeterCode)
		arg.Currencies = append(arg.Currencies, l.Currency)
		arg.PlanCodes = append(arg.PlanCodes, l.PlanCode)
		arg.PriceVersions = append(arg.PriceVersions, l.PriceVersion)
		arg.DimensionsKeys = append(arg.DimensionsKeys, l.DimensionsKey)
		arg.Unpriceds = append(arg.Unpriceds, l.Unpriced)
	}
	rows, err := q.LinePricings(ctx, arg)
	if err != nil {
		return fmt.Errorf("read the pricing of %d lines: %w", len(lines), err)
	}
	if len(rows) != len(lines) {
		return fmt.Errorf("%w: %d pricings for %d lines", ErrInternal, len(rows), len(lines))
	}
	for i, r := range rows {
		l := &lines[r.N-1]
		if int(r.N) != i+1 {
			return fmt.Errorf("%w: pricing %d out of order", ErrInternal, r.N)
		}
		l.Model, l.UnitPrice, l.Tiers, l.PackageSize, l.PackagePrice = r.Model, r.UnitPrice, r.Tiers, r.PackageSize, r.PackagePrice
	}
	return nil
}

// errTooManyLines stops a read of a period with more lines than its bound.
var errTooManyLines = fmt.Errorf("too many lines")

// partLines reads a period's lines from their parts (PartLines: a few rows
// a line, folded as batches add them, see FoldParts) and prices them. More
// than maxLines lines (when maxLines >= 0) is errTooManyLines; the
// statement reads at most one line past the bound. What it reads and holds
// grows with the period's lines, not its charges.
func partLines(ctx context.Context, q *db.Queries, tenantID, period string, maxLines int) ([]Line, error) {
	limit := int32(math.MaxInt32)
	if maxLines >= 0 {
		limit = int32(maxLines) + 1
	}
	rows, err := q.PartLines(ctx, db.PartLinesParams{TenantID: tenantID, Period: period, LineLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("read the lines of %s: %w", period, err)
	}
	if maxLines >= 0 && len(rows) > maxLines {
		return nil, errTooManyLines
	}
	t := newPeriodTally()
	for _, r := range rows {
		t.sums[lineKey{MeterCode: r.MeterCode, Currency: r.Currency, PlanCode: r.PlanCode, PriceVersion: r.PriceVersion,
			DimensionsKey: r.DimensionsKey, Unpriced: r.Unpriced, Aggregation: r.Aggregation}] = &lineSums{
			Dimensions: r.Dimensions, Charges: r.Charges, Total: r.Total, Peak: r.Peak, Amount: r.Amount,
			DistinctValues: r.DistinctValues, HasLatest: r.HasLatest, Latest: catalog.Observation{Quantity: r.LatestQuantity,
				OccurredAt: r.LatestAt, SourceSystem: r.LatestSystem, SourceEventID: r.LatestSource}}
	}
	lines := t.lines()
	return lines, priceLines(ctx, q, tenantID, lines)
}

// loadCloseTally reads a closing period's running tally from close_line.
func loadCloseTally(ctx context.Context, q *db.Queries, tenantID, period string) (*periodTally, error) {
	rows, err := q.CloseLineSums(ctx, db.CloseLineSumsParams{TenantID: tenantID, Period: period})
	if err != nil {
		return nil, fmt.Errorf("read the tally of %s: %w", period, err)
	}
	t := newPeriodTally()
	for _, r := range rows {
		t.sums[lineKey{MeterCode: r.MeterCode, Currency: r.Currency, PlanCode: r.PlanCode, PriceVersion: r.PriceVersion,
			DimensionsKey: r.DimensionsKey, Unpriced: r.Unpriced, Aggregation: r.Aggregation}] = &lineSums{
			Dimensions: r.Dimensions, Charges: r.Charges, Total: r.Total, Peak: r.Peak, Amount: r.Amount, Digest: r.Digest,
			DistinctValues: r.DistinctValues, HasLatest: r.HasLatest, Latest: catalog.Observation{Quantity: r.LatestQuantity,
				OccurredAt: r.LatestAt, SourceSystem: r.LatestSystem, SourceEventID: r.LatestSource}}
	}
	return t, nil
}

// saveCloseTally writes the lines the last chunk changed back to
// close_line.
func saveCloseTally(ctx context.Context, q *db.Queries, tenantID, period string, t *periodTally) error {
	arg := db.PutCloseLinesParams{TenantID: tenantID, Period: period}
	for k := range t.changed {
		s := t.sums[k]
		arg.MeterCodes = append(arg.MeterCodes, k.MeterCode)
		arg.Currencies = append(arg.Currencies, k.Currency)
		arg.PlanCodes = append(arg.PlanCodes, k.PlanCode)
		arg.PriceVersions = append(arg.PriceVersions, k.PriceVersion)
		arg.DimensionsKeys = append(arg.DimensionsKeys, k.DimensionsKey)
		arg.Unpriceds = append(arg.Unpriceds, k.Unpriced)
		arg.Aggregations = append(arg.Aggregations, k.Aggregation)
		arg.Dimensionses = append(arg.Dimensionses, s.Dimensions)
		arg.Chargeses = append(arg.Chargeses, s.Charges)
		arg.Totals = append(arg.Totals, s.Total)
		arg.Peaks = append(arg.Peaks, s.Peak)
		arg.Amounts = append(arg.Amounts, s.Amount)
		arg.Digests = append(arg.Digests, s.Digest)
		arg.DistinctValueses = append(arg.DistinctValueses, s.DistinctValues)
		arg.HasLatests = append(arg.HasLatests, s.HasLatest)
		arg.LatestAts = append(arg.LatestAts, s.Latest.OccurredAt)
		arg.LatestSystems = append(arg.LatestSystems, s.Latest.SourceSystem)
		arg.LatestSources = append(arg.LatestSources, s.Latest.SourceEventID)
		arg.LatestQuantities = append(arg.LatestQuantities, s.Latest.Quantity)
	}
	if len(arg.MeterCodes) == 0 {
		return nil
	}
	if err := q.PutCloseLines(ctx, arg); err != nil {
		return fmt.Errorf("write the tally of %s: %w", period, err)
	}
	return nil
}

// closeValues is a close's set of the values seen: close_value, which
// outlives the chunk's transaction.
func closeValues(q *db.Queries, tenantID, period string) valueSet {
	return func(ctx context.Context, vals []lineValue) (map[lineKey]int64, error) {
		arg := db.AddCloseValuesParams{TenantID: tenantID, Period: period}
		for _, v := range vals {
			arg.MeterCodes = append(arg.MeterCodes, v.key.MeterCode)
			arg.Currencies = append(arg.Currencies, v.key.Currency)
			arg.PlanCodes = append(arg.PlanCodes, v.key.PlanCode)
			arg.PriceVersions = append(arg.PriceVersions, v.key.PriceVersion)
			arg.DimensionsKeys = append(arg.DimensionsKeys, v.key.DimensionsKey)
			arg.Unpriceds = append(arg.Unpriceds, v.key.Unpriced)
			arg.Vals = append(arg.Vals, v.value)
		}
		rows, err := q.AddCloseValues(ctx, arg)
		if err != nil {
			return nil, fmt.Errorf("add the values of %s: %w", period, err)
		}
		// close_value's key has no aggregation: every value is of a
		// unique_count line.
		fresh := map[lineKey]int64{}
		for _, r := range rows {
			fresh[lineKey{MeterCode: r.MeterCode, Currency: r.Currency, PlanCode: r.PlanCode, PriceVersion: r.PriceVersion,
				DimensionsKey: r.DimensionsKey, Unpriced: r.Unpriced, Aggregation: catalog.UniqueCount}]++
		}
		return fresh, nil
	}
}
