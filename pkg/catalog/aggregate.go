package catalog

import (
	"time"

	"github.com/shopspring/decimal"
)

// Observation is what one charge (or fact) contributes to an aggregation.
type Observation struct {
	Quantity      decimal.Decimal
	OccurredAt    time.Time
	SourceSystem  string
	SourceEventID string
	Value         string // unique_count: the valueProperty's value
}

// After reports whether o is later than p in latest's order: occurredAt,
// then (sourceSystem, sourceEventId).
func (o Observation) After(p Observation) bool {
	if !o.OccurredAt.Equal(p.OccurredAt) {
		return o.OccurredAt.After(p.OccurredAt)
	}
	if o.SourceSystem != p.SourceSystem {
		return o.SourceSystem > p.SourceSystem
	}
	return o.SourceEventID > p.SourceEventID
}

// Aggregate is an order-independent running aggregation: Add in any order
// gives the same Quantity. unique_count keeps the set
// of values it has seen, so it is for bounded sets in memory (a test's
// model, one analytics window); services keep that set in their database.
type Aggregate struct {
	Aggregation string
	n           int64
	sum         decimal.Decimal
	max         decimal.Decimal
	latest      Observation
	values      map[string]struct{}
}

// NewAggregate returns an empty aggregation of kind agg.
func NewAggregate(agg string) *Aggregate {
	if agg == "" {
		agg = Sum
	}
	return &Aggregate{Aggregation: agg}
}

// Add counts one observation.
func (a *Aggregate) Add(o Observation) {
	if a.n == 0 || o.Quantity.GreaterThan(a.max) {
		a.max = o.Quantity
	}
	if a.n == 0 || o.After(a.latest) {
		a.latest = o
	}
	a.n++
	a.sum = a.sum.Add(o.Quantity)
	if a.Aggregation == UniqueCount {
		if a.values == nil {
			a.values = make(map[string]struct{})
		}
		a.values[o.Value] = struct{}{}
	}
}

// Count is the number of observations added.
func (a *Aggregate) Count() int64 { return a.n }

// Quantity is the aggregation's figure; zero when nothing was added.
func (a *Aggregate) Quantity() decimal.Decimal {
	if a.n == 0 {
		return decimal.Zero
	}
	switch a.Aggregation {
	case Count:
		return decimal.NewFromInt(a.n)
	case Max:
		return a.max
	case Latest:
		return a.latest.Quantity
	case UniqueCount:
		return decimal.NewFromInt(int64(len(a.values)))
	default:
		return a.sum
	}
}
