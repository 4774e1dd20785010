package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
)

// MeterDefined replicates the catalog: a meter is recorded once; the same
// definition again (a redelivery, or a republication under another event
// id) changes nothing; another definition of its code, or its event type
// claimed by another code, is a contract breach, quarantined.
func TestMeterDefinedThroughInbox(t *testing.T) {
	e := usagetest.New(t)
	tokens := catalog.Meter{Code: "tokens", Name: "Tokens", Aggregation: catalog.Sum, ValueProperty: "tokens",
		Dimensions: []string{"model", "region"}, EventType: "prompt"}
	users := catalog.Meter{Code: "users", Name: "Users", Aggregation: catalog.UniqueCount, ValueProperty: "user_id"}
	first := usagetest.MeterEvent(t, tokens)
	if got, want := fmt.Sprint(outcomes(e.Deliver(t, first, usagetest.MeterEvent(t, users), first))), "[applied applied duplicate]"; got != want {
		t.Fatalf("decisions %s, want %s", got, want)
	}
	var agg, vp, et string
	var dims []string
	if err := e.Pool.QueryRow(t.Context(), `SELECT aggregation, value_property, dimensions, event_type FROM meters WHERE code = 'tokens'`).
		Scan(&agg, &vp, &dims, &et); err != nil {
		t.Fatal(err)
	}
	if agg != "sum" || vp != "tokens" || fmt.Sprint(dims) != "[model region]" || et != "prompt" {
		t.Fatalf("meter row %s %s %v %s", agg, vp, dims, et)
	}
	if err := e.Pool.QueryRow(t.Context(), `SELECT event_type FROM meters WHERE code = 'users'`).Scan(&et); err != nil || et != "users" {
		t.Fatalf("users' event type %q (%v), want its code", et, err)
	}

	// The inbox absorbs a second event for the meter's one version as a
	// duplicate (version_already_applied) before any handler runs: the
	// meter is unchanged. An event type claimed by another code reaches
	// the handler, which quarantines it.
	redefined := tokens
	redefined.Aggregation = catalog.Max
	sameType := catalog.Meter{Code: "tokens2", Name: "Tokens", Aggregation: catalog.Sum, ValueProperty: "n", EventType: "prompt"}
	tests := []struct {
		name, want string
		raw        []byte
	}{
		{"the same definition again", inbox.OutcomeDuplicate + ":" + inbox.ReasonVersionApplied, usagetest.MeterEvent(t, tokens)},
		{"another definition", inbox.OutcomeDuplicate + ":" + inbox.ReasonVersionApplied, usagetest.MeterEvent(t, redefined)},
		{"its event type for another code", inbox.OutcomeQuarantined + ":" + inbox.ReasonPermanent, usagetest.MeterEvent(t, sameType)},
	}
	for _, tt := range tests {
		if got := outcomes(e.Deliver(t, tt.raw))[0]; got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	if n := e.Count(t, `SELECT count(*) FROM meters`); n != 2 {
		t.Fatalf("%d meters, want 2", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM meters WHERE code = 'tokens' AND aggregation = 'sum'`); n != 1 {
		t.Fatal("the redefinition changed the meter")
	}

	// The handler itself, should a redefinition reach it: the same
	// content is a no-op, other content a permanent error.
	a := app.New(app.Deps{Pool: e.Pool}, app.Config{})
	apply := func(m catalog.Meter) error {
		d, err := e.Registry.Decode(usagetest.MeterEvent(t, m))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := e.Pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(t.Context())
		_, err = a.ApplyMeterDefined(t.Context(), tx, d, d.Payload.(events.MeterDefined))
		return err
	}
	if err := apply(tokens); err != nil {
		t.Fatalf("the same definition: %v", err)
	}
	if err := apply(redefined); err == nil || !strings.Contains(err.Error(), "never changes") {
		t.Fatalf("a redefinition: %v, want a permanent error", err)
	}
}
