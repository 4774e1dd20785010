// Package querytest helps the query service's tests: a migrated database
// template, public events built the way their producers build them
// (envelope.New, each aggregate's version rule), and deciding them through
// the real inbox path (Marshal, registry decode, inbox.Decide in a
// transaction) through the inbox the service builds (package servicetest,
// query.Spec).
package querytest

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// Template is the query database (servicetest.Template of query.Spec),
// migrated once per test process.
var Template = servicetest.Template(query.Spec)

// D parses a decimal.
func D(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// Event is a built event and the topic its producer publishes it on.
type Event struct {
	Topic    string
	Envelope envelope.Envelope
}

// Feed builds one tenant's public events, numbering each aggregate's
// versions as its producer does. At is the occurredAt of the next event; it
// advances by a second per event.
type Feed struct {
	t        testing.TB
	Tenant   string
	At       time.Time
	versions map[string]int64
	numbers  int64 // the last invoice number given
}

// NewFeed starts the events of tenant.
func NewFeed(t testing.TB, tenant string) *Feed {
	return &Feed{t: t, Tenant: tenant, At: time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC), versions: map[string]int64{}}
}

func (f *Feed) build(topic, eventType, producer, aggType, aggID string, version int64, payload any) Event {
	f.t.Helper()
	if version == 0 {
		f.versions[aggType+"/"+aggID]++
		version = f.versions[aggType+"/"+aggID]
	}
	e, err := envelope.New(envelope.Meta{
		EventType: eventType, SchemaVersion: 1, TenantID: f.Tenant, AggregateType: aggType, AggregateID: aggID,
		AggregateVersion: version, OccurredAt: f.At, Producer: producer,
	}, payload)
	if err != nil {
		f.t.Fatalf("build %s: %v", eventType, err)
	}
	f.At = f.At.Add(time.Second)
	return Event{Topic: topic, Envelope: e}
}

// Price builds a PriceActivated, the next version of the meter's series.
func (f *Feed) Price(meter, currency, unitPrice string) Event {
	id := events.PriceSeriesID(meter, currency)
	v := f.versions[events.AggregatePrice+"/"+id] + 1
	return f.build(events.TopicMeter, events.TypePriceActivated, "meter", events.AggregatePrice, id, 0,
		events.PriceActivated{PriceID: uuid.New(), MeterCode: meter, Currency: currency, UnitPrice: D(unitPrice),
			EffectiveAt: f.At, Version: v})
}

// Usage builds a UsageAccepted.
func (f *Feed) Usage(meter, currency, quantity string) Event {
	id := uuid.New()
	return f.build(events.TopicUsage, events.TypeUsageAccepted, "usage", events.AggregateUsage, id.String(), 1,
		events.UsageAccepted{UsageID: id, SourceSystem: "test", SourceEventID: id.String(), MeterCode: meter,
			Quantity: D(quantity), OccurredAt: f.At, Currency: currency, PriceVersion: 1})
}

// Charge builds the ChargeRated of a usage event at unitPrice.
func (f *Feed) Charge(usage Event, period, unitPrice string) Event {
	u := payload[events.UsageAccepted](f.t, usage)
	amount := u.Quantity.Mul(D(unitPrice))
	id := uuid.New()
	return f.build(events.TopicBilling, events.TypeChargeRated, "billing", events.AggregateCharge, id.String(), 1,
		events.ChargeRated{ChargeID: id, UsageEventID: usage.Envelope.EventID, UsageID: u.UsageID,
			MeterCode: u.MeterCode, Currency: u.Currency, Quantity: u.Quantity, UnitPrice: D(unitPrice),
			PriceVersion: 1, Amount: amount, Period: period, OccurredAt: u.OccurredAt})
}

// LineCharge builds the ChargeRated of a usage event under a version of
// another model than unit: no unit price or amount of its own, the
// version's pricing carried (decision 0012).
func (f *Feed) LineCharge(usage Event, period string, version int64, p pricing.Pricing) Event {
	u := payload[events.UsageAccepted](f.t, usage)
	id := uuid.New()
	return f.build(events.TopicBilling, events.TypeChargeRated, "billing", events.AggregateCharge, id.String(), 1,
		events.ChargeRated{ChargeID: id, UsageEventID: usage.Envelope.EventID, UsageID: u.UsageID,
			MeterCode: u.MeterCode, Currency: u.Currency, Quantity: u.Quantity, PriceVersion: version,
			Period: period, OccurredAt: u.OccurredAt, Model: p.Model, Pricing: &p})
}

// Adjustment builds an AdjustmentPosted.
func (f *Feed) Adjustment(period, currency, amount string) Event {
	id := uuid.New()
	return f.build(events.TopicBilling, events.TypeAdjustmentPosted, "billing", events.AggregateAdjustment, id.String(), 1,
		events.AdjustmentPosted{AdjustmentID: id, CorrectionOf: uuid.New(), Amount: D(amount),
			Currency: currency, Reason: "test", Period: period})
}

// Close builds a BillingPeriodClosed (counts and totals are not checked by
// the query service).
func (f *Feed) Close(period string) Event {
	return f.build(events.TopicBilling, events.TypeBillingPeriodClosed, "billing", events.AggregateBillingPeriod, period, 1,
		events.BillingPeriodClosed{Period: period, ClosedAt: f.At, Totals: map[string]decimal.Decimal{},
			Currencies: map[string]events.CloseTally{}})
}

// Invoice builds an InvoiceIssued of subtotal and total (the rounding is
// their difference), the tenant's next invoice number.
func (f *Feed) Invoice(period, currency, subtotal, total string) (Event, uuid.UUID) {
	id := uuid.New()
	f.numbers++
	return f.build(events.TopicInvoice, events.TypeInvoiceIssued, "invoice", events.AggregateInvoice, id.String(), 1,
		events.InvoiceIssued{InvoiceID: id, Number: f.numbers, Period: period, Currency: currency,
			Subtotal: D(subtotal), Rounding: D(total).Sub(D(subtotal)), Total: D(total), IssuedAt: f.At}), id
}

// Correction builds the next InvoiceCorrectionIssued of invoice id.
func (f *Feed) Correction(invoiceID uuid.UUID, adjustment Event, period, currency, amount string) Event {
	key := events.AggregateInvoice + "/" + invoiceID.String()
	if f.versions[key] == 0 {
		f.versions[key] = 1 // InvoiceIssued
	}
	return f.build(events.TopicInvoice, events.TypeInvoiceCorrectionIssued, "invoice", events.AggregateInvoice, invoiceID.String(), 0,
		events.InvoiceCorrectionIssued{CorrectionID: uuid.New(), InvoiceID: invoiceID,
			OriginEventID: adjustment.Envelope.EventID, Period: period, Currency: currency, Amount: D(amount), IssuedAt: f.At})
}

func payload[T any](t testing.TB, e Event) T {
	t.Helper()
	reg := servicetest.Registry(query.Spec)
	raw, err := e.Envelope.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d, err := reg.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d.Payload.(T)
}

// NewInbox returns the inbox service.NewInbox builds for query.Spec (its
// OriginConstraints, the redriver and the quarantine announcements) over
// the projection's batch handlers.
func NewInbox(t testing.TB) *inbox.Inbox {
	t.Helper()
	return NewInboxWith(t, nil)
}

// NewInboxWith is NewInbox with handlers beside the projection's, as the
// service adds the operator's (operator.Operator.Handlers).
func NewInboxWith(t testing.TB, handlers map[string]inbox.Handler) *inbox.Inbox {
	t.Helper()
	return servicetest.NewInbox(t, query.Spec, service.Parts{
		Topics: append(slices.Clone(app.Topics), events.TopicOps), Handlers: handlers, BatchHandlers: app.New(app.Deps{}, app.Config{}).BatchHandlers(),
	})
}

// Decide decides evs in order, as one batch in one transaction.
func Decide(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, evs ...Event) []inbox.Decision {
	t.Helper()
	msgs := make([]inbox.Message, len(evs))
	for i, e := range evs {
		raw, err := e.Envelope.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = inbox.Message{Raw: raw, Topic: e.Topic, Offset: int64(i)}
	}
	return servicetest.Decide(t, pool, ib, msgs...)
}

// Meter builds a MeterDefined of the catalog (tenant events.CatalogTenant).
func Meter(t testing.TB, code, aggregation, valueProperty string, dimensions ...string) Event {
	t.Helper()
	e, err := envelope.New(envelope.Meta{
		EventType: events.TypeMeterDefined, SchemaVersion: 1, TenantID: events.CatalogTenant,
		AggregateType: events.AggregateMeter, AggregateID: code, AggregateVersion: 1,
		OccurredAt: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), Producer: "meter",
	}, events.MeterDefined{Code: code, Name: code, Aggregation: aggregation, ValueProperty: valueProperty,
		Dimensions: dimensions, EventType: code, DefinedAt: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatalf("build MeterDefined: %v", err)
	}
	return Event{Topic: events.TopicMeter, Envelope: e}
}

// Fact builds the UsageAccepted of a fact with properties that occurred at
// at, identified by (sourceSystem "test", sourceEventID).
func (f *Feed) Fact(meter, quantity string, at time.Time, sourceEventID string, props map[string]string) Event {
	f.t.Helper()
	id := uuid.New()
	saved := f.At
	f.At = at
	e := f.build(events.TopicUsage, events.TypeUsageAccepted, "usage", events.AggregateUsage, id.String(), 1,
		events.UsageAccepted{UsageID: id, SourceSystem: "test", SourceEventID: sourceEventID, MeterCode: meter,
			Quantity: D(quantity), OccurredAt: at, Currency: "USD", Properties: props})
	f.At = saved
	return e
}

// PeriodEnded builds a BillingPeriodEnded of period in zone.
func (f *Feed) PeriodEnded(period, zone string) Event {
	return f.build(events.TopicBilling, events.TypeBillingPeriodEnded, "billing", events.AggregateBillingPeriod, period, 1,
		events.BillingPeriodEnded{Period: period, TimeZone: zone, EndedAt: f.At, ClosesAt: f.At.Add(time.Hour)})
}

// AggregateCharge builds the ChargeRated of a usage event of a catalog meter
// (aggregation, price dimensions, the fact's identity and properties) under
// pricing p at version; value is a unique_count meter's value. Under sum and
// count unit pricing it has its own amount.
func (f *Feed) AggregateCharge(usage Event, period, aggregation string, version int64, p pricing.Pricing,
	dims map[string]string, value string) Event {
	u := payload[events.UsageAccepted](f.t, usage)
	id := uuid.New()
	c := events.ChargeRated{ChargeID: id, UsageEventID: usage.Envelope.EventID, UsageID: u.UsageID,
		MeterCode: u.MeterCode, Currency: u.Currency, Quantity: u.Quantity, PriceVersion: version,
		Period: period, OccurredAt: u.OccurredAt, Model: p.Model, Pricing: &p, Aggregation: aggregation,
		Dimensions: dims, Properties: u.Properties, SourceSystem: u.SourceSystem, SourceEventID: u.SourceEventID,
		Value: value}
	if (aggregation == "sum" || aggregation == "count") && (p.Model == "" || p.Model == pricing.Unit) {
		c.UnitPrice = *p.UnitPrice
		c.Amount = c.Counted().Mul(c.UnitPrice)
		c.Pricing, c.Model = nil, ""
	}
	return f.build(events.TopicBilling, events.TypeChargeRated, "billing", events.AggregateCharge, id.String(), 1, c)
}

// UnpricedCharge builds the ChargeRated of a usage event no price rated
// (section 3a): no version, no amount, on its meter's unpriced line.
func (f *Feed) UnpricedCharge(usage Event, period, aggregation, value string) Event {
	u := payload[events.UsageAccepted](f.t, usage)
	id := uuid.New()
	return f.build(events.TopicBilling, events.TypeChargeRated, "billing", events.AggregateCharge, id.String(), 1,
		events.ChargeRated{ChargeID: id, UsageEventID: usage.Envelope.EventID, UsageID: u.UsageID,
			MeterCode: u.MeterCode, Currency: u.Currency, Quantity: u.Quantity, Period: period, OccurredAt: u.OccurredAt,
			Aggregation: aggregation, Properties: u.Properties, SourceSystem: u.SourceSystem,
			SourceEventID: u.SourceEventID, Value: value, Unpriced: true})
}

// LateCharge builds the ChargeRated of a usage event at unitPrice billed
// late into period (its own period had closed when it arrived).
func (f *Feed) LateCharge(usage Event, period, unitPrice string) Event {
	u := payload[events.UsageAccepted](f.t, usage)
	id := uuid.New()
	return f.build(events.TopicBilling, events.TypeChargeRated, "billing", events.AggregateCharge, id.String(), 1,
		events.ChargeRated{ChargeID: id, UsageEventID: usage.Envelope.EventID, UsageID: u.UsageID,
			MeterCode: u.MeterCode, Currency: u.Currency, Quantity: u.Quantity, UnitPrice: D(unitPrice),
			PriceVersion: 1, Amount: u.Quantity.Mul(D(unitPrice)), Period: period, Late: true, OccurredAt: u.OccurredAt,
			Properties: u.Properties, SourceSystem: u.SourceSystem, SourceEventID: u.SourceEventID})
}

// ClosedAt builds a BillingPeriodClosed of period that ended at end (in the
// tenant's zone).
func (f *Feed) ClosedAt(period string, end time.Time) Event {
	return f.build(events.TopicBilling, events.TypeBillingPeriodClosed, "billing", events.AggregateBillingPeriod, period, 1,
		events.BillingPeriodClosed{Period: period, ClosedAt: f.At, Totals: map[string]decimal.Decimal{},
			Currencies: map[string]events.CloseTally{}, PeriodEnd: end})
}
