package events_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
)

// TestEveryTypeHasItsTopic pins the contract's table: every event type is
// registered, has an aggregate type, and is published on the topic it
// always was (topic names never change).
func TestEveryTypeHasItsTopic(t *testing.T) {
	want := map[string]string{
		events.TypeMeterDefined:            events.TopicMeter,
		events.TypePriceActivated:          events.TopicMeter,
		events.TypePriceScheduleWatermark:  events.TopicMeter,
		events.TypePlanPublished:           events.TopicMeter,
		events.TypeUsageAccepted:           events.TopicUsage,
		events.TypeUsageAcceptedThrough:    events.TopicUsage,
		events.TypeChargeRated:             events.TopicBilling,
		events.TypeAdjustmentPosted:        events.TopicBilling,
		events.TypeBillingPeriodClosed:     events.TopicBilling,
		events.TypeBillingPeriodEnded:      events.TopicBilling,
		events.TypeInvoiceIssued:           events.TopicInvoice,
		events.TypeInvoiceCorrectionIssued: events.TopicInvoice,
		events.TypeEventQuarantined:        events.TopicOps,
		events.TypeRedriveRequested:        events.TopicOpsCommands,
		events.TypeRedriveCompleted:        events.TopicOps,
	}
	r := envelope.NewRegistry()
	events.Register(r)
	types := events.Types()
	if len(types) != len(want) {
		t.Errorf("the table has %d event types, want %d: %v", len(types), len(want), types)
	}
	for _, typ := range types {
		if _, ok := want[typ]; !ok {
			t.Errorf("event type %s is in the table but not pinned by this test", typ)
		}
	}
	for typ, topic := range want {
		if got := events.Topic(typ); got != topic {
			t.Errorf("Topic(%s) = %q, want %q", typ, got, topic)
		}
		if !slices.Contains(events.AllTopics, events.Topic(typ)) {
			t.Errorf("topic %q of %s is not in AllTopics", events.Topic(typ), typ)
		}
		if events.AggregateType(typ) == "" {
			t.Errorf("AggregateType(%s) is empty", typ)
		}
		if !r.Known(typ, events.SchemaVersion) {
			t.Errorf("%s v%d is not registered", typ, events.SchemaVersion)
		}
	}
	if got := events.Topic("NoSuchEvent"); got != "" {
		t.Errorf(`Topic("NoSuchEvent") = %q, want ""`, got)
	}
}

// TestNewDerivesMetadataFromThePayload: the event type, schema version,
// aggregate type and partition key follow from the payload, and the
// envelope decodes back into the payload's own type.
func TestNewDerivesMetadataFromThePayload(t *testing.T) {
	usageID := uuid.Must(uuid.NewV7())
	eventID := uuid.Must(uuid.NewV7())
	p := usage(usageID)
	env, err := events.New(p, events.Meta{Producer: "usage", TenantID: "t1", AggregateID: usageID.String(),
		OccurredAt: p.OccurredAt, CorrelationID: "req-1", EventID: eventID})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	got := []any{env.EventID, env.EventType, env.SchemaVersion, env.AggregateType, env.AggregateVersion,
		env.PartitionKey, env.CorrelationID, env.CausationID, env.Traceparent, env.Producer}
	want := []any{eventID, events.TypeUsageAccepted, 1, events.AggregateUsage, int64(1),
		"t1|usage|" + usageID.String(), "req-1", "", "", "usage"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("envelope metadata\n got %v\nwant %v", got, want)
	}
	r := envelope.NewRegistry()
	events.Register(r)
	raw, err := env.Marshal()
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	d, err := r.Decode(raw)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if _, ok := d.Payload.(events.UsageAccepted); !ok {
		t.Fatalf("decoded payload is %T, want events.UsageAccepted", d.Payload)
	}
}

// TestCausedCopiesFromTheHandledEvent: an event emitted while handling
// another carries its correlation id, its event id as causation id and its
// traceparent; a cause without a correlation id starts the flow.
func TestCausedCopiesFromTheHandledEvent(t *testing.T) {
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	usageID := uuid.Must(uuid.NewV7())
	p := usage(usageID)
	meta := events.Meta{Producer: "usage", TenantID: "t1", AggregateID: usageID.String(), OccurredAt: p.OccurredAt}
	tests := []struct {
		name            string
		correlation     string
		traceparent     string
		wantCorrelation func(cause envelope.Envelope) string
	}{
		{"correlated and traced", "req-7", traceparent, func(envelope.Envelope) string { return "req-7" }},
		{"no correlation, no trace", "", "", func(c envelope.Envelope) string { return c.EventID.String() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := meta
			m.CorrelationID = tc.correlation
			cause, err := events.New(p, m)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			cause.Traceparent = tc.traceparent // as a consumer receives it
			chargeID := uuid.Must(uuid.NewV7())
			env, err := events.Caused(&cause, charge(chargeID, cause.EventID, p), events.Meta{
				Producer: "billing", TenantID: cause.TenantID, AggregateID: chargeID.String(), OccurredAt: time.Now()})
			if err != nil {
				t.Fatalf("Caused: %v", err)
			}
			got := []string{env.CorrelationID, env.CausationID, env.Traceparent, env.EventType, env.AggregateType}
			want := []string{tc.wantCorrelation(cause), cause.EventID.String(), tc.traceparent,
				events.TypeChargeRated, events.AggregateCharge}
			if !slices.Equal(got, want) {
				t.Fatalf("caused envelope\n got %q\nwant %q", got, want)
			}
			if env.EventID == cause.EventID {
				t.Fatal("caused event reuses its cause's event id")
			}
		})
	}
}

func TestCausedRefusesItsOwnCorrelation(t *testing.T) {
	usageID := uuid.Must(uuid.NewV7())
	p := usage(usageID)
	cause, err := events.New(p, events.Meta{Producer: "usage", TenantID: "t1", AggregateID: usageID.String(), OccurredAt: p.OccurredAt})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	chargeID := uuid.Must(uuid.NewV7())
	_, err = events.Caused(&cause, charge(chargeID, cause.EventID, p), events.Meta{Producer: "billing", TenantID: "t1",
		AggregateID: chargeID.String(), OccurredAt: time.Now(), CorrelationID: "other"})
	if err == nil {
		t.Fatal("Caused with its own correlation id: no error")
	}
}

func TestNewRefusesAnInvalidEnvelope(t *testing.T) {
	_, err := events.New(usage(uuid.Must(uuid.NewV7())), events.Meta{Producer: "usage", AggregateID: "x", OccurredAt: time.Now()})
	var derr *envelope.DecodeError
	if !errors.As(err, &derr) || derr.Reason != envelope.MissingField("tenantId") {
		t.Fatalf("New without a tenant: %v, want %s", err, envelope.MissingField("tenantId"))
	}
}

func usage(id uuid.UUID) events.UsageAccepted {
	return events.UsageAccepted{UsageID: id, SourceSystem: "s", SourceEventID: "e1", MeterCode: "api_calls",
		Quantity: decimal.RequireFromString("3"), OccurredAt: time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC), Currency: "USD"}
}

func charge(id, usageEventID uuid.UUID, u events.UsageAccepted) events.ChargeRated {
	return events.ChargeRated{ChargeID: id, UsageEventID: usageEventID, UsageID: u.UsageID, MeterCode: u.MeterCode,
		Currency: u.Currency, Quantity: u.Quantity, UnitPrice: decimal.RequireFromString("0.5"), PriceVersion: 1,
		Amount: decimal.RequireFromString("1.5"), Period: "2026-11", OccurredAt: u.OccurredAt}
}

// A close's tax rates are held to billing's bounds in characters: a name of
// 100 characters that takes more bytes (é) is valid, of 101 it is not.
func TestTaxRateNamesCountCharacters(t *testing.T) {
	closed := func(name string) events.BillingPeriodClosed {
		return events.BillingPeriodClosed{Period: "2027-06", ClosedAt: time.Now(), Totals: map[string]decimal.Decimal{},
			Currencies: map[string]events.CloseTally{},
			TaxRates:   []events.TaxRate{{Code: "TVA", Name: name, Rate: decimal.RequireFromString("0.2")}}}
	}
	name := strings.Repeat("é", 100)
	if err := closed(name).Validate(); err != nil {
		t.Fatalf("a name of 100 characters (%d bytes) refused: %v", len(name), err)
	}
	if err := closed(name + "e").Validate(); err == nil {
		t.Fatal("a name of 101 characters accepted")
	}
}

// A close names an earlier period as the one closed before it, or none.
func TestPreviousPeriodIsEarlier(t *testing.T) {
	closed := func(prev string) events.BillingPeriodClosed {
		return events.BillingPeriodClosed{Period: "2027-06", ClosedAt: time.Now(), Totals: map[string]decimal.Decimal{},
			Currencies: map[string]events.CloseTally{}, PreviousPeriod: prev}
	}
	for prev, ok := range map[string]bool{"": true, "2027-05": true, "2019-01": true, "2027-06": false, "2027-07": false, "2027-13": false, "May": false} {
		if err := closed(prev).Validate(); (err == nil) != ok {
			t.Errorf("previousPeriod %q: valid %v, want %v (%v)", prev, err == nil, ok, err)
		}
	}
}
