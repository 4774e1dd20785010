package events

import (
	"fmt"

	"github.com/usagebilling/billing/pkg/envelope"
)

// Payload is the payload of an event of the contract: its Go type names its
// event type, and through it the topic, aggregate type and schema version
// (the table kinds, which lists every payload type of the contract). A
// consumer keys its handlers by Type (inbox.Handle), so a handler's key
// and its payload type cannot disagree.
type Payload interface {
	Type() string
}

// kind is what the contract fixes for one event type: the payload's Go type
// (through register), the topic it is published on and the type of the
// aggregate that emits it. Every event type is at schema version 1.
type kind struct {
	eventType     string
	topic         string
	aggregateType string
	register      func(*envelope.Registry)
}

// SchemaVersion is the schema version every event of the contract is built
// at.
const SchemaVersion = 1

// kindOf is the row of payload type T: its event type is T's, so a payload
// can never be published or registered under another type's name.
func kindOf[T Payload](topic, aggregateType string) kind {
	var zero T
	t := zero.Type()
	return kind{eventType: t, topic: topic, aggregateType: aggregateType,
		register: func(r *envelope.Registry) { envelope.Register[T](r, t, SchemaVersion) }}
}

// kinds is the one table of event types: Register, New, Caused and Topic
// read it. Topic names are part of the contract and never change.
var kinds = []kind{
	kindOf[MeterDefined](TopicMeter, AggregateMeter),
	kindOf[PriceActivated](TopicMeter, AggregatePrice),
	kindOf[PriceScheduleWatermark](TopicMeter, AggregatePriceSchedule),
	kindOf[PlanPublished](TopicMeter, AggregatePlan),
	kindOf[UsageAccepted](TopicUsage, AggregateUsage),
	kindOf[UsageAcceptedThrough](TopicUsage, AggregateUsageWatermark),
	kindOf[ChargeRated](TopicBilling, AggregateCharge),
	kindOf[AdjustmentPosted](TopicBilling, AggregateAdjustment),
	kindOf[BillingPeriodClosed](TopicBilling, AggregateBillingPeriod),
	kindOf[BillingPeriodEnded](TopicBilling, AggregateBillingPeriodEnd),
	kindOf[InvoiceIssued](TopicInvoice, AggregateInvoice),
	kindOf[InvoiceCorrectionIssued](TopicInvoice, AggregateInvoice),
	kindOf[EventQuarantined](TopicOps, AggregateOps),
	kindOf[RedriveRequested](TopicOpsCommands, AggregateOps),
	kindOf[RedriveCompleted](TopicOps, AggregateOps),
}

// byType indexes kinds by event type.
var byType = func() map[string]kind {
	m := make(map[string]kind, len(kinds))
	for _, k := range kinds {
		if _, dup := m[k.eventType]; dup {
			panic(fmt.Sprintf("events: %s listed twice", k.eventType))
		}
		m[k.eventType] = k
	}
	return m
}()

// Register registers every payload type of the contract, schema version 1.
func Register(r *envelope.Registry) {
	for _, k := range kinds {
		k.register(r)
	}
}

// Types lists every event type of the contract, in the table's order.
func Types() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.eventType
	}
	return out
}

// Topic returns the topic events of eventType are published on, "" for a
// type outside the contract.
func Topic(eventType string) string { return byType[eventType].topic }

// AggregateType returns the type of the aggregate that emits events of
// eventType, "" for a type outside the contract.
func AggregateType(eventType string) string { return byType[eventType].aggregateType }

// The event type of each payload, the key of its row in kinds.

func (MeterDefined) Type() string            { return TypeMeterDefined }
func (PriceActivated) Type() string          { return TypePriceActivated }
func (PriceScheduleWatermark) Type() string  { return TypePriceScheduleWatermark }
func (UsageAccepted) Type() string           { return TypeUsageAccepted }
func (UsageAcceptedThrough) Type() string    { return TypeUsageAcceptedThrough }
func (ChargeRated) Type() string             { return TypeChargeRated }
func (AdjustmentPosted) Type() string        { return TypeAdjustmentPosted }
func (BillingPeriodClosed) Type() string     { return TypeBillingPeriodClosed }
func (BillingPeriodEnded) Type() string      { return TypeBillingPeriodEnded }
func (InvoiceIssued) Type() string           { return TypeInvoiceIssued }
func (InvoiceCorrectionIssued) Type() string { return TypeInvoiceCorrectionIssued }
func (EventQuarantined) Type() string        { return TypeEventQuarantined }
func (RedriveRequested) Type() string        { return TypeRedriveRequested }
func (RedriveCompleted) Type() string        { return TypeRedriveCompleted }
