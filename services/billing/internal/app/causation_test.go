package app_test

import (
	"testing"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// A ChargeRated carries its UsageAccepted's correlation id and traceparent,
// and the usage event's id as its causation id (events.Caused), on the
// billing topic.
func TestChargeRatedCarriesItsCause(t *testing.T) {
	t.Parallel()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	pool := bt.NewPool(t)
	ib := bt.NewInbox(t, app.New(app.Deps{Pool: pool}, app.Config{}))
	bt.DefineMeters(t, pool, ib)

	usage, _ := usageAt("t1", 0, "2", jan10).Envelope(t)
	usage.Traceparent = traceparent
	raw, err := usage.Marshal()
	if err != nil {
		t.Fatalf("marshal usage: %v", err)
	}
	wantOutcomes(t, bt.Decide(t, pool, ib, priceV1("t1").Raw(t), raw), "applied", "applied")

	var rated []bt.Published
	for _, p := range bt.Outbox(t, pool) {
		if p.Envelope.EventType == events.TypeChargeRated {
			rated = append(rated, p)
		}
	}
	if len(rated) != 1 {
		t.Fatalf("%d ChargeRated in the outbox, want 1", len(rated))
	}
	e := rated[0]
	got := []string{e.Topic, e.Envelope.CorrelationID, e.Envelope.CausationID, e.Envelope.Traceparent}
	want := []string{events.TopicBilling, usage.CorrelationID, usage.EventID.String(), traceparent}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ChargeRated topic, correlation, causation, traceparent = %q, want %q", got, want)
		}
	}
}
