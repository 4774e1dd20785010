// Package domain holds the query service's rules: what each public event
// contributes to its tenant's summary and to the per-event projection, and
// how folded totals make a summary. It knows nothing of HTTP, Kafka or SQL.
package domain

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

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

// ChargeLine names a charge line: what an invoice (and billing's estimate)
// prices as a whole under a model other than unit (decision 0012).
type ChargeLine struct {
	TenantID, Period, Currency, MeterCode string
	PriceVersion                          int64
}

// LinePriced returns the line of a charge whose version is priced by the
// line (graduated, volume, package) and its pricing; false for a unit
// charge, whose Amount is its own.
func LinePriced(tenantID string, c events.ChargeRated) (ChargeLine, pricing.Pricing, bool) {
	if c.Model == "" || c.Model == pricing.Unit || c.Pricing == nil {
		return ChargeLine{}, pricing.Pricing{}, false
	}
	return ChargeLine{TenantID: tenantID, Period: c.Period, Currency: c.Currency, MeterCode: c.MeterCode,
		PriceVersion: c.PriceVersion}, *c.Pricing, true
}

// LineDelta is what a charge of quantity q adds to the price of its line
// that held before: p(before+q) - p(before). Charges of a line added one
// after another sum to p(the line's quantity) exactly, in any order (each
// sees the quantity the ones before it left); under volume pricing a
// delta may be negative (the line reaches a cheaper tier).
func LineDelta(p pricing.Pricing, before, q decimal.Decimal) decimal.Decimal {
	return p.Amount(before.Add(q)).Sub(p.Amount(before))
}
