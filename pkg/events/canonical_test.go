package events_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
)

// TestPerFactPayloadsAreCanonical: the payloads published once per fact
// (UsageAccepted by usage, ChargeRated by billing) declare their fields in
// the byte order of their JSON names, so encoding/json writes them in
// canonical form and envelope.New checks them where they lie instead of
// sorting them again. Every field is set here, so a field added out of
// order fails the test. (A charge carrying Pricing, of a model other than
// unit, is rebuilt: pricing.Pricing is not in that order, and such charges
// are not the bulk.)
func TestPerFactPayloadsAreCanonical(t *testing.T) {
	id := uuid.Must(uuid.NewV7())
	at := time.Date(2026, 12, 5, 6, 7, 8, 123456000, time.UTC)
	props := map[string]string{"region": "eu", "model": "m1", "Zone": "z"}
	for name, p := range map[string]any{
		"UsageAccepted": events.UsageAccepted{UsageID: id, SourceSystem: "api", SourceEventID: "e-1", MeterCode: "calls",
			Quantity: decimal.RequireFromString("1.5"), OccurredAt: at, Currency: "USD", PriceVersion: 3, Properties: props},
		"ChargeRated": events.ChargeRated{ChargeID: id, UsageEventID: id, UsageID: id, MeterCode: "calls", Currency: "USD",
			Quantity: decimal.RequireFromString("1.5"), UnitPrice: decimal.RequireFromString("0.2"), PriceVersion: 3,
			Amount: decimal.RequireFromString("0.3"), Period: "2026-12", Late: true, OccurredAt: at, Model: "unit",
			Aggregation: "sum", Dimensions: props, Properties: props, SourceSystem: "api", SourceEventID: "e-1",
			Value: "v", Unpriced: true, PlanCode: "pro"},
	} {
		out := encode(t, p)
		canon, err := envelope.Canonical(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, canon) {
			t.Errorf("%s: encoding/json writes\n%s\nnot its canonical form\n%s\n(declare the fields in the order of their JSON names)", name, out, canon)
		}
	}
}
