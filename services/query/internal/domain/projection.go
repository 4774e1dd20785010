// Package domain holds the query service's rules: what each public event
// contributes to its tenant's summary and to the per-event projection, and
// how folded totals make a summary. It knows nothing of HTTP, Kafka or SQL.
package domain

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
)

// Delta kinds: what an event adds to its tenant's summary.
const (
	KindUsage    = "usage"    // key: meter code; amount: quantity; each one counts a usage fact
	KindCharged  = "charged"  // key: currency; amount: the charge (see LineDelta)
	KindAdjusted = "adjusted" // key: currency; amount: the adjustment
	KindInvoiced = "invoiced" // key: currency; amount: an invoice's total or a correction's amount
	KindSeen     = "seen"     // no money: the event only counts for lastEventAt
)

// Delta is what one event adds to its tenant's summary.
type Delta struct {
	Kind   string
	Key    string
	Amount decimal.Decimal
}

// Fact is the per-event row of a projected event, beside the envelope's own
// fields. Zero values mean "not applicable".
type Fact struct {
	SubjectID     uuid.UUID
	OriginEventID uuid.UUID
	Period        string
	MeterCode     string
	Currency      string
	Quantity      *decimal.Decimal
	UnitPrice     *decimal.Decimal
	Amount        *decimal.Decimal
}

// Project returns the fact and the summary delta of a decoded payload.
func Project(payload any) (Fact, Delta, error) {
	switch p := payload.(type) {
	case events.PriceActivated:
		return Fact{SubjectID: p.PriceID, MeterCode: p.MeterCode, Currency: p.Currency, UnitPrice: &p.UnitPrice},
			Delta{Kind: KindSeen}, nil
	case events.UsageAccepted:
		return Fact{SubjectID: p.UsageID, Period: events.Period(p.OccurredAt), MeterCode: p.MeterCode,
				Currency: p.Currency, Quantity: &p.Quantity},
			Delta{Kind: KindUsage, Key: p.MeterCode, Amount: p.Quantity}, nil
	case events.ChargeRated:
		return Fact{SubjectID: p.ChargeID, OriginEventID: p.UsageEventID, Period: p.Period, MeterCode: p.MeterCode,
				Currency: p.Currency, Quantity: &p.Quantity, UnitPrice: &p.UnitPrice, Amount: &p.Amount},
			Delta{Kind: KindCharged, Key: p.Currency, Amount: p.Amount}, nil
	case events.AdjustmentPosted:
		return Fact{SubjectID: p.AdjustmentID, Period: p.Period, Currency: p.Currency, Amount: &p.Amount},
			Delta{Kind: KindAdjusted, Key: p.Currency, Amount: p.Amount}, nil
	case events.BillingPeriodClosed:
		return Fact{Period: p.Period}, Delta{Kind: KindSeen}, nil
	case events.InvoiceIssued:
		return Fact{SubjectID: p.InvoiceID, Period: p.Period, Currency: p.Currency, Amount: &p.Total},
			Delta{Kind: KindInvoiced, Key: p.Currency, Amount: p.Total}, nil
	case events.InvoiceCorrectionIssued:
		return Fact{SubjectID: p.CorrectionID, OriginEventID: p.OriginEventID, Period: p.Period, Currency: p.Currency,
				Amount: &p.Amount},
			Delta{Kind: KindInvoiced, Key: p.Currency, Amount: p.Amount}, nil
	default:
		return Fact{}, Delta{}, fmt.Errorf("no projection for payload %T", payload)
	}
}

// Total is a folded total of a tenant: the sum of a kind's deltas for a key
// and how many events made it.
type Total struct {
	Kind   string
	Key    string
	Amount decimal.Decimal
	Events int64
}

// Summary is a tenant's summary.
type Summary struct {
	TenantID        string
	UsageCount      int64
	QuantityByMeter map[string]decimal.Decimal
	Charged         map[string]decimal.Decimal
	Adjusted        map[string]decimal.Decimal
	Invoiced        map[string]decimal.Decimal
	LastEventAt     *time.Time // nil before the tenant's first event
}

// Summarize makes a tenant's summary from its folded totals. A tenant with
// no event has an all-zero summary.
func Summarize(tenantID string, totals []Total, lastEventAt *time.Time) Summary {
	s := Summary{
		TenantID:        tenantID,
		QuantityByMeter: map[string]decimal.Decimal{},
		Charged:         map[string]decimal.Decimal{},
		Adjusted:        map[string]decimal.Decimal{},
		Invoiced:        map[string]decimal.Decimal{},
		LastEventAt:     lastEventAt,
	}
	for _, t := range totals {
		switch t.Kind {
		case KindUsage:
			s.UsageCount += t.Events
			s.QuantityByMeter[t.Key] = s.QuantityByMeter[t.Key].Add(t.Amount)
		case KindCharged:
			s.Charged[t.Key] = s.Charged[t.Key].Add(t.Amount)
		case KindAdjusted:
			s.Adjusted[t.Key] = s.Adjusted[t.Key].Add(t.Amount)
		case KindInvoiced:
			s.Invoiced[t.Key] = s.Invoiced[t.Key].Add(t.Amount)
		}
	}
	return s
}

// ChargeLine names a charge line priced as a whole: what an invoice (and
// billing's estimate) prices as a whole — a version under a model other than
// unit (decision 0012), or any version of a max, latest or unique_count
// meter. The line is (meter, price version, price dimensions, plan) in the
// tenant's period and currency: a plan's charge and the tenant's own price
// of the same version number and dimensions are two lines.
type ChargeLine struct {
	TenantID, Period, Currency, MeterCode string
	PriceVersion                          int64
	DimensionsKey                         string // LineDimensionsKey of the price
}

// planKeyName holds a plan charge's plan in its line's DimensionsKey; no
// dimension name holds "@".
const planKeyName = "@plan"

// LineDimensionsKey is catalog.Key of a price's dimensions, with the plan
// of a plan's charge ("" for the tenant's own price) as one more pair.
func LineDimensionsKey(planCode string, dims map[string]string) string {
	if planCode == "" {
		return catalog.Key(dims)
	}
	withPlan := make(map[string]string, len(dims)+1)
	for k, v := range dims {
		withPlan[k] = v
	}
	withPlan[planKeyName] = planCode
	return catalog.Key(withPlan)
}

// LinePriced returns the line of a charge priced by its line and the line's
// pricing (the charge carries it); false for a charge whose Amount is its
// own (sum and count under unit pricing) and for an unpriced one (amount 0).
func LinePriced(tenantID string, c events.ChargeRated) (ChargeLine, pricing.Pricing, bool) {
	if c.Unpriced || c.Pricing == nil {
		return ChargeLine{}, pricing.Pricing{}, false
	}
	if catalog.PricedPerCharge(c.Aggregation) && (c.Model == "" || c.Model == pricing.Unit) {
		return ChargeLine{}, pricing.Pricing{}, false
	}
	return ChargeLine{TenantID: tenantID, Period: c.Period, Currency: c.Currency, MeterCode: c.MeterCode,
		PriceVersion: c.PriceVersion, DimensionsKey: LineDimensionsKey(c.PlanCode, c.Dimensions)}, *c.Pricing, true
}

// LineDelta is what a charge of quantity q adds to the price of its line
// that held before: p(before+q) - p(before). Charges of a line added one
// after another sum to p(the line's quantity) exactly, in any order (each
// sees the quantity the ones before it left); under volume pricing a
// delta may be negative (the line reaches a cheaper tier).
func LineDelta(p pricing.Pricing, before, q decimal.Decimal) decimal.Decimal {
	return p.Amount(before.Add(q)).Sub(p.Amount(before))
}

// LineState is a charge line's aggregation so far: its quantity under the
// meter's aggregation (catalog.Aggregate's rules) and, for latest, the
// latest charge (nil for an empty line). A unique_count line's set of
// values is kept beside it (the caller says whether a value is new).
type LineState struct {
	Quantity decimal.Decimal
	Latest   *catalog.Observation
}

// Add counts charge c in the line (fresh: for unique_count, whether its
// value is new to the line) and returns what it adds to the line's price p:
// p(quantity after) - p(quantity before). The deltas of a line's charges,
// added in any order, sum to p(the line's quantity), as the invoice prices
// the line (under latest and volume a delta may be negative).
func (s *LineState) Add(p pricing.Pricing, c events.ChargeRated, fresh bool) decimal.Decimal {
	before := s.Quantity
	switch c.Aggregation {
	case catalog.Count:
		s.Quantity = s.Quantity.Add(decimal.NewFromInt(1))
	case catalog.Max:
		if c.Quantity.GreaterThan(s.Quantity) {
			s.Quantity = c.Quantity
		}
	case catalog.Latest:
		o := catalog.Observation{Quantity: c.Quantity, OccurredAt: c.OccurredAt, SourceSystem: c.SourceSystem,
			SourceEventID: c.SourceEventID}
		if s.Latest == nil || o.After(*s.Latest) {
			s.Latest, s.Quantity = &o, c.Quantity
		}
	case catalog.UniqueCount:
		if fresh {
			s.Quantity = s.Quantity.Add(decimal.NewFromInt(1))
		}
	default:
		s.Quantity = s.Quantity.Add(c.Quantity)
	}
	return p.Amount(s.Quantity).Sub(p.Amount(before))
}
