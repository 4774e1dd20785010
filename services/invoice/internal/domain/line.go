package domain

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/pricing"
)

// KindUnpriced is the line of a meter's charges rated with no price in
// effect (DESIGN.md section 3a): amount 0, price version 0.
const KindUnpriced = "unpriced"

// DimensionsKey is the canonical, reversible key of a price's identity
// within its meter and version, part of a line's identity: its dimension
// set and, for a plan's charge, the plan (under the name planKeyName, which
// no dimension can have: catalog keys hold no "@"). The names in order,
// each name=value with the value query-escaped, joined by & ("" for a
// tenant's own price without dimensions). catalog.Key is canonical too but
// joins with NUL, which a PostgreSQL text column cannot hold.
func DimensionsKey(dims map[string]string) string { return LineKey("", dims) }

// planKeyName holds the plan of a plan charge's line in its key.
const planKeyName = "@plan"

// LineKey is DimensionsKey of a price of plan planCode ("" for the
// tenant's own) with the dimensions dims.
func LineKey(planCode string, dims map[string]string) string {
	if len(dims) == 0 && planCode == "" {
		return ""
	}
	v := make(url.Values, len(dims)+1)
	for k, x := range dims {
		v.Set(k, x)
	}
	if planCode != "" {
		v.Set(planKeyName, planCode)
	}
	return v.Encode() // sorted by name
}

// PriceKey is the key the pricing of a charge's price is recorded under
// beside its meter and version: the line key of a plan's charge (a plan
// version holds one pricing per meter and dimension set, and shares its
// number with the tenant's own versions), "" for the tenant's own version
// (one pricing per version). The line statements tell them apart by the line key's
// %40plan= pair (db/queries.sql).
func PriceKey(planCode string, dims map[string]string) string {
	if planCode == "" {
		return ""
	}
	return LineKey(planCode, dims)
}

// ParseDimensionsKey is the plan ("" for a tenant's own price) and the
// dimension set (nil for none) of a DimensionsKey.
func ParseDimensionsKey(key string) (plan string, dims map[string]string, err error) {
	if key == "" {
		return "", nil, nil
	}
	v, err := url.ParseQuery(key)
	if err != nil {
		return "", nil, fmt.Errorf("dimensions key %q: %w", key, err)
	}
	out := make(map[string]string, len(v))
	for k, xs := range v {
		if len(xs) != 1 {
			return "", nil, fmt.Errorf("dimensions key %q: %d values of %q", key, len(xs), k)
		}
		if k == planKeyName {
			plan = xs[0]
			continue
		}
		out[k] = xs[0]
	}
	if len(out) == 0 {
		out = nil
	}
	return plan, out, nil
}

// LineID is the id of the line of a meter's charges:
// "charge/<meterCode>/<priceVersion>" (ChargeLineID) for a price without
// dimensions, "charge/<meterCode>/<priceVersion>/<dimensionsKey>" for one
// with, "unpriced/<meterCode>" for the unpriced charges.
func LineID(meterCode string, priceVersion int64, dimensionsKey string, unpriced bool) string {
	id := KindCharge + "/" + meterCode + "/" + strconv.FormatInt(priceVersion, 10)
	if unpriced {
		id = KindUnpriced + "/" + meterCode
	}
	if dimensionsKey != "" {
		id += "/" + dimensionsKey
	}
	return id
}

// Group is what the charges of one line hold, as grouped in SQL: the
// figures its quantity and amount are computed from.
type Group struct {
	MeterCode     string
	PriceVersion  int64
	DimensionsKey string
	Unpriced      bool
	Aggregation   string // "" or catalog.Sum for charges from before the catalog
	UnitPrice     decimal.Decimal
	ChargeCount   int64
	Sum           decimal.Decimal  // of the charges' quantities
	Amount        decimal.Decimal  // of the charges' own amounts
	Figure        *decimal.Decimal // max, latest: the line's running figure
	Distinct      int64            // unique_count: the line's distinct values
	// Pricing is the version's, as its charges carried it (nil: unit, by
	// UnitPrice, or unpriced).
	Pricing *pricing.Pricing
}

// LineID is the id of the group's line.
func (g Group) LineID() string {
	return LineID(g.MeterCode, g.PriceVersion, g.DimensionsKey, g.Unpriced)
}

// Kind is the kind of the group's line: charge or unpriced.
func (g Group) Kind() string {
	if g.Unpriced {
		return KindUnpriced
	}
	return KindCharge
}

// Quantity is the line's quantity: its meter's aggregation over its
// charges (package catalog): sum of their quantities, their count, the
// running figure of a max or latest line, the number of distinct values of
// a unique_count line.
func (g Group) Quantity() (decimal.Decimal, error) {
	switch g.Aggregation {
	case "", catalog.Sum:
		return g.Sum, nil
	case catalog.Count:
		return decimal.NewFromInt(g.ChargeCount), nil
	case catalog.Max, catalog.Latest:
		if g.Figure == nil {
			return decimal.Decimal{}, fmt.Errorf("line %s: %s charges without a running figure", g.LineID(), g.Aggregation)
		}
		return *g.Figure, nil
	case catalog.UniqueCount:
		return decimal.NewFromInt(g.Distinct), nil
	default:
		return decimal.Decimal{}, fmt.Errorf("line %s: unknown aggregation %q", g.LineID(), g.Aggregation)
	}
}

// PricedWhole reports whether the line is priced as a whole, by its
// version's pricing over its quantity (decision 0012): under every model
// but unit, and under unit pricing for the aggregations whose charges have
// no amount of their own (max, latest, unique_count). Otherwise (sum and
// count under unit pricing) its amount is its charges' amounts.
func (g Group) PricedWhole() bool {
	if g.Unpriced {
		return false
	}
	if !catalog.PricedPerCharge(g.Aggregation) {
		return true
	}
	return g.Pricing != nil && g.Pricing.Model != pricing.Unit
}

// Line is a line computed from its group: quantity and amount.
type Line struct {
	Quantity decimal.Decimal
	Amount   decimal.Decimal
}

// Price computes the line of g. An unpriced line's amount is 0 (its charges
// carry none); a line priced per charge is its charges' amounts, each
// quantity x the unit price (checked when check is set: the close); a line
// priced whole is its version's pricing over its quantity, its charges
// carrying no amount.
func (g Group) Price(check bool) (Line, error) {
	id := g.LineID()
	q, err := g.Quantity()
	if err != nil {
		return Line{}, err
	}
	switch {
	case g.Unpriced:
		if check && !g.Amount.IsZero() {
			return Line{}, fmt.Errorf("line %s: unpriced charges carry amounts (%s)", id, g.Amount)
		}
		return Line{Quantity: q, Amount: decimal.Zero}, nil
	case !g.PricedWhole():
		if check {
			if err := CheckLine(id, Pricing{Model: ModelUnit, UnitPrice: g.UnitPrice}, q, g.Amount); err != nil {
				return Line{}, err
			}
		}
		return Line{Quantity: q, Amount: g.Amount}, nil
	case g.Pricing == nil:
		return Line{}, fmt.Errorf("line %s: %s charges without their version's pricing", id, g.Aggregation)
	}
	if check && !g.Amount.IsZero() {
		return Line{}, fmt.Errorf("line %s: %s charges carry amounts (%s)", id, g.Pricing.Model, g.Amount)
	}
	amount, err := LineAmount(PricingOf(*g.Pricing), q)
	if err != nil {
		return Line{}, fmt.Errorf("line %s: %w", id, err)
	}
	return Line{Quantity: q, Amount: amount}, nil
}
