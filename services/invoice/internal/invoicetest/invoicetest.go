// Package invoicetest helps the invoice service's tests: a migrated database
// template, billing events built the way billing builds them (envelope.New,
// each charge and adjustment its own aggregate at version 1, a close that
// tallies what it counts per currency with pkg/digest), and deciding them
// through the real inbox path (Marshal, registry decode, inbox.Decide in a
// transaction) through the inbox the service builds (package servicetest,
// invoice.Spec).
package invoicetest

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/digest"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// Template is the invoice database (servicetest.Template of invoice.Spec),
// migrated once per test process.
var Template = servicetest.Template(invoice.Spec)

// D parses a decimal.
func D(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// Meter is the meter of Charge.
const Meter = "api_calls"

// Period builds the events of one tenant's billing period as billing does.
// Charges and adjustments built before Close are what the close counts;
// an adjustment built after it is posted after the close (AfterClose).
type Period struct {
	t      testing.TB
	Tenant string
	Period string
	// After is the period billing closed before this one (the close's
	// PreviousPeriod); "" for none.
	After  string
	closed bool
	// What the close counts, by currency, and the digests behind it.
	tallies                  map[string]events.CloseTally
	chargeIDs, adjustmentIDs map[string]*digest.Set
}

// NewPeriod starts the events of tenant's period.
func NewPeriod(t testing.TB, tenant, period string) *Period {
	return &Period{t: t, Tenant: tenant, Period: period, tallies: map[string]events.CloseTally{},
		chargeIDs: map[string]*digest.Set{}, adjustmentIDs: map[string]*digest.Set{}}
}

func (p *Period) build(eventType, aggregateType, aggregateID string, payload any) envelope.Envelope {
	p.t.Helper()
	e, err := envelope.New(envelope.Meta{
		EventType: eventType, SchemaVersion: 1, TenantID: p.Tenant,
		AggregateType: aggregateType, AggregateID: aggregateID, AggregateVersion: 1,
		OccurredAt: time.Now(), Producer: "billing", CorrelationID: "test-" + p.Tenant,
	}, payload)
	if err != nil {
		p.t.Fatalf("build %s: %v", eventType, err)
	}
	return e
}

func set(m map[string]*digest.Set, currency string) *digest.Set {
	s, ok := m[currency]
	if !ok {
		s = new(digest.Set)
		m[currency] = s
	}
	return s
}

// Charge builds a ChargeRated of quantity x unitPrice in currency, for
// meter Meter at price version 1.
func (p *Period) Charge(currency, quantity, unitPrice string) envelope.Envelope {
	p.t.Helper()
	return p.ChargeOf(currency, Meter, 1, quantity, unitPrice)
}

// ChargeOf builds a ChargeRated of quantity x unitPrice in currency, for
// meter at price version. Before Close it counts towards the close.
func (p *Period) ChargeOf(currency, meter string, version int64, quantity, unitPrice string) envelope.Envelope {
	p.t.Helper()
	q, u := D(quantity), D(unitPrice)
	chargeID := uuid.New()
	e := p.build(events.TypeChargeRated, events.AggregateCharge, chargeID.String(), events.ChargeRated{
		ChargeID: chargeID, UsageEventID: uuid.New(), UsageID: uuid.New(), MeterCode: meter,
		Currency: currency, Quantity: q, UnitPrice: u, PriceVersion: version, Amount: q.Mul(u),
		Period: p.Period, OccurredAt: time.Now().UTC(),
	})
	if !p.closed {
		t := p.tallies[currency]
		s := set(p.chargeIDs, currency)
		s.Add(e.EventID)
		t.Charges, t.ChargeAmount, t.ChargeDigest = t.Charges+1, t.ChargeAmount.Add(q.Mul(u)), s.String()
		if t.AdjustmentDigest == "" {
			t.AdjustmentDigest = "0"
		}
		p.tallies[currency] = t
	}
	return e
}

// ChargePriced builds a ChargeRated of quantity in currency for meter at a
// price version under another model than unit: no amount of its own, the
// version's pricing carried. Before Close it counts towards the close
// (with amount 0).
func (p *Period) ChargePriced(currency, meter string, version int64, quantity string, pr pricing.Pricing) envelope.Envelope {
	p.t.Helper()
	chargeID := uuid.New()
	e := p.build(events.TypeChargeRated, events.AggregateCharge, chargeID.String(), events.ChargeRated{
		ChargeID: chargeID, UsageEventID: uuid.New(), UsageID: uuid.New(), MeterCode: meter,
		Currency: currency, Quantity: D(quantity), PriceVersion: version, Period: p.Period, OccurredAt: time.Now().UTC(),
		Model: pr.Model, Pricing: &pr,
	})
	if !p.closed {
		t := p.tallies[currency]
		s := set(p.chargeIDs, currency)
		s.Add(e.EventID)
		t.Charges, t.ChargeDigest = t.Charges+1, s.String()
		if t.AdjustmentDigest == "" {
			t.AdjustmentDigest = "0"
		}
		p.tallies[currency] = t
	}
	return e
}

// ChargeRated builds the ChargeRated c of the period's tenant as billing
// does with the catalog's fields (Aggregation, Dimensions, Value,
// SourceSystem and SourceEventID, Unpriced): ChargeID, UsageEventID,
// UsageID and Period are filled when empty; Currency defaults to USD and
// MeterCode to Meter. Before Close it counts towards the close with its own
// amount.
func (p *Period) ChargeRated(c events.ChargeRated) envelope.Envelope {
	p.t.Helper()
	if c.ChargeID == uuid.Nil {
		c.ChargeID = uuid.New()
	}
	if c.UsageEventID == uuid.Nil {
		c.UsageEventID, c.UsageID = uuid.New(), uuid.New()
	}
	if c.Period == "" {
		c.Period = p.Period
	}
	if c.Currency == "" {
		c.Currency = "USD"
	}
	if c.MeterCode == "" {
		c.MeterCode = Meter
	}
	if err := c.Validate(); err != nil {
		p.t.Fatalf("ChargeRated %+v: %v", c, err)
	}
	e := p.build(events.TypeChargeRated, events.AggregateCharge, c.ChargeID.String(), c)
	if !p.closed {
		t := p.tallies[c.Currency]
		s := set(p.chargeIDs, c.Currency)
		s.Add(e.EventID)
		t.Charges, t.ChargeAmount, t.ChargeDigest = t.Charges+1, t.ChargeAmount.Add(c.Amount), s.String()
		if t.AdjustmentDigest == "" {
			t.AdjustmentDigest = "0"
		}
		p.tallies[c.Currency] = t
	}
	return e
}

// Adjustment builds an AdjustmentPosted of amount in currency. Before Close
// it counts towards the close; after, it is posted after the close.
func (p *Period) Adjustment(currency, amount string) envelope.Envelope {
	p.t.Helper()
	a := D(amount)
	adjustmentID := uuid.New()
	e := p.build(events.TypeAdjustmentPosted, events.AggregateAdjustment, adjustmentID.String(), events.AdjustmentPosted{
		AdjustmentID: adjustmentID, CorrectionOf: uuid.New(), Amount: a, Currency: currency,
		Reason: "test", Period: p.Period, AfterClose: p.closed,
	})
	if !p.closed {
		t := p.tallies[currency]
		s := set(p.adjustmentIDs, currency)
		s.Add(e.EventID)
		t.Adjustments, t.AdjustmentAmount, t.AdjustmentDigest = t.Adjustments+1, t.AdjustmentAmount.Add(a), s.String()
		if t.ChargeDigest == "" {
			t.ChargeDigest = "0"
		}
		p.tallies[currency] = t
	}
	return e
}

// Tallies returns a copy of what the close would count, by currency.
func (p *Period) Tallies() map[string]events.CloseTally { return maps.Clone(p.tallies) }

// Close builds the BillingPeriodClosed counting every charge and adjustment
// built so far; the adjustments built after it are posted after the close.
func (p *Period) Close() envelope.Envelope {
	p.t.Helper()
	return p.CloseWith(p.Tallies())
}

// CloseWithFees builds the BillingPeriodClosed of Close carrying fees (the
// fixed-fee and true-up lines billing computed) by currency.
func (p *Period) CloseWithFees(fees map[string][]events.FeeLine) envelope.Envelope {
	p.t.Helper()
	return p.closeWith(p.Tallies(), fees)
}

// CloseWithTaxes builds the BillingPeriodClosed of Close carrying the
// period's tax rates.
func (p *Period) CloseWithTaxes(rates ...events.TaxRate) envelope.Envelope {
	p.t.Helper()
	return p.closeWith(p.Tallies(), nil, rates...)
}

// CloseWith builds a BillingPeriodClosed with the given tallies (its counts
// and totals follow from them).
func (p *Period) CloseWith(tallies map[string]events.CloseTally) envelope.Envelope {
	p.t.Helper()
	return p.closeWith(tallies, nil)
}

func (p *Period) closeWith(tallies map[string]events.CloseTally, fees map[string][]events.FeeLine, rates ...events.TaxRate) envelope.Envelope {
	p.t.Helper()
	p.closed = true
	closed := events.BillingPeriodClosed{Period: p.Period, ClosedAt: time.Now().UTC(),
		Totals: map[string]decimal.Decimal{}, Currencies: map[string]events.CloseTally{}, Fees: fees, TaxRates: rates,
		PreviousPeriod: p.After}
	for cur, t := range tallies {
		closed.Charges += t.Charges
		closed.Adjustments += t.Adjustments
		closed.Totals[cur] = t.ChargeAmount.Add(t.AdjustmentAmount)
		closed.Currencies[cur] = t
	}
	return p.build(events.TypeBillingPeriodClosed, events.AggregateBillingPeriod, p.Period, closed)
}

// NewInbox returns the inbox service.NewInbox builds for invoice.Spec (its
// OriginConstraints, the redriver and the quarantine announcements) over the
// App's handlers.
func NewInbox(t testing.TB) *inbox.Inbox {
	t.Helper()
	a := app.New(app.Deps{}, app.Config{}) // its handlers use the inbox's transaction only
	return servicetest.NewInbox(t, invoice.Spec, service.Parts{
		Topics: app.Topics, Handlers: a.Handlers(), BatchHandlers: a.BatchHandlers(),
	})
}

// Raw marshals envelopes as the relay sends them.
func Raw(t testing.TB, envs ...envelope.Envelope) [][]byte {
	t.Helper()
	out := make([][]byte, len(envs))
	for i, e := range envs {
		b, err := e.Marshal()
		if err != nil {
			t.Fatalf("marshal %s: %v", e.EventType, err)
		}
		out[i] = b
	}
	return out
}

// Sweep runs the inbox's periodic sweep once, as the runner does, and
// returns how many deferred events it applied.
func Sweep(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox) int {
	t.Helper()
	n, err := ib.Sweep(context.Background(), pool, 100)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	return n
}

// Decide decides envs in order, as one batch in one transaction, and returns
// the decisions (those of woken deferred events last).
func Decide(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, envs ...envelope.Envelope) []inbox.Decision {
	t.Helper()
	return DecideRaw(t, pool, ib, Raw(t, envs...)...)
}

// DecideRaw is Decide for raw messages.
func DecideRaw(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, raws ...[]byte) []inbox.Decision {
	t.Helper()
	return servicetest.Decide(t, pool, ib, servicetest.Messages(events.TopicBilling, raws...)...)
}

// Published returns the invoice events this service appended to its outbox,
// in order; the announcements of quarantines on ops.events.v1 are left out.
func Published(t testing.TB, pool *pgxpool.Pool) []*envelope.Decoded {
	t.Helper()
	return servicetest.Events(t, invoice.Spec, pool, events.TopicInvoice)
}
