package domain

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestProject(t *testing.T) {
	usageEvent, adjEvent := uuid.New(), uuid.New()
	at := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	tests := []struct {
		name    string
		payload any
		delta   Delta
		check   func(Fact) bool
	}{
		{"price", events.PriceActivated{MeterCode: "api", Currency: "USD", UnitPrice: d("0.01")},
			Delta{Kind: KindSeen}, func(f Fact) bool { return f.UnitPrice.Equal(d("0.01")) && f.Amount == nil }},
		{"usage", events.UsageAccepted{MeterCode: "api", Quantity: d("2.5"), OccurredAt: at, Currency: "USD"},
			Delta{Kind: KindUsage, Key: "api", Amount: d("2.5")}, func(f Fact) bool { return f.Period == "2026-11" && f.Quantity.Equal(d("2.5")) }},
		{"charge", events.ChargeRated{UsageEventID: usageEvent, Currency: "KRW", Amount: d("12.5"), Period: "2026-11"},
			Delta{Kind: KindCharged, Key: "KRW", Amount: d("12.5")}, func(f Fact) bool { return f.OriginEventID == usageEvent && f.Amount.Equal(d("12.5")) }},
		{"adjustment", events.AdjustmentPosted{Currency: "USD", Amount: d("-1"), Period: "2026-11"},
			Delta{Kind: KindAdjusted, Key: "USD", Amount: d("-1")}, func(f Fact) bool { return f.Amount.Equal(d("-1")) }},
		{"close", events.BillingPeriodClosed{Period: "2026-11"},
			Delta{Kind: KindSeen}, func(f Fact) bool { return f.Period == "2026-11" && f.Amount == nil }},
		{"invoice", events.InvoiceIssued{Currency: "USD", Subtotal: d("1.005"), Total: d("1")},
			Delta{Kind: KindInvoiced, Key: "USD", Amount: d("1")}, func(f Fact) bool { return f.Amount.Equal(d("1")) }},
		{"correction", events.InvoiceCorrectionIssued{OriginEventID: adjEvent, Currency: "USD", Amount: d("-0.5")},
			Delta{Kind: KindInvoiced, Key: "USD", Amount: d("-0.5")}, func(f Fact) bool { return f.OriginEventID == adjEvent }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, got, err := Project(tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tt.delta.Kind || got.Key != tt.delta.Key || !got.Amount.Equal(tt.delta.Amount) {
				t.Fatalf("delta %+v, want %+v", got, tt.delta)
			}
			if !tt.check(f) {
				t.Fatalf("fact %+v", f)
			}
		})
	}
	if _, _, err := Project(events.RedriveRequested{}); err == nil {
		t.Fatal("Project of an unprojected payload: want an error")
	}
}

func TestSummarize(t *testing.T) {
	at := time.Now()
	s := Summarize("acme", []Total{
		{Kind: KindUsage, Key: "api", Amount: d("10.5"), Events: 3},
		{Kind: KindUsage, Key: "cpu", Amount: d("2"), Events: 2},
		{Kind: KindCharged, Key: "USD", Amount: d("1.25"), Events: 5},
		{Kind: KindAdjusted, Key: "USD", Amount: d("-0.25"), Events: 1},
		{Kind: KindInvoiced, Key: "USD", Amount: d("1"), Events: 2},
	}, &at)
	if s.UsageCount != 5 || !s.QuantityByMeter["api"].Equal(d("10.5")) || !s.Charged["USD"].Equal(d("1.25")) ||
		!s.Adjusted["USD"].Equal(d("-0.25")) || !s.Invoiced["USD"].Equal(d("1")) || s.LastEventAt != &at {
		t.Fatalf("summary %+v", s)
	}
	zero := Summarize("nobody", nil, nil)
	if zero.UsageCount != 0 || len(zero.Charged) != 0 || zero.QuantityByMeter == nil || zero.LastEventAt != nil {
		t.Fatalf("empty summary %+v", zero)
	}
}

// The charged deltas of a line's charges, each priced against the quantity
// the ones before it left, sum to the line's pricing over its quantity in
// every order, under every model (volume deltas may be negative).
func TestLineDeltasSumToTheLinesPrice(t *testing.T) {
	ten, hundred := decimal.NewFromInt(10), decimal.NewFromInt(100)
	size, price := decimal.NewFromInt(10), decimal.RequireFromString("2.5")
	unit := decimal.RequireFromString("0.01")
	models := map[string]pricing.Pricing{
		"unit": pricing.UnitPricing(unit),
		"graduated": {Model: pricing.Graduated, Tiers: []pricing.Tier{
			{UpTo: &ten, UnitPrice: decimal.RequireFromString("0.1"), FlatFee: decimal.NewFromInt(2)},
			{UnitPrice: decimal.RequireFromString("0.05")}}},
		"volume": {Model: pricing.Volume, Tiers: []pricing.Tier{
			{UpTo: &ten, UnitPrice: decimal.NewFromInt(1)}, {UpTo: &hundred, UnitPrice: decimal.RequireFromString("0.5")},
			{UnitPrice: decimal.RequireFromString("0.25")}}},
		"package": {Model: pricing.Package, PackageSize: &size, PackagePrice: &price},
	}
	quantities := []string{"6", "6", "0.5", "95", "3"}
	orders := [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}}
	for name, p := range models {
		total := decimal.Zero
		for _, q := range quantities {
			total = total.Add(decimal.RequireFromString(q))
		}
		want := p.Amount(total)
		for _, order := range orders {
			before, sum := decimal.Zero, decimal.Zero
			for _, i := range order {
				q := decimal.RequireFromString(quantities[i])
				sum = sum.Add(LineDelta(p, before, q))
				before = before.Add(q)
			}
			if !sum.Equal(want) {
				t.Errorf("%s, order %v: deltas sum to %s, want %s", name, order, sum, want)
			}
		}
	}
}

// A plan's charge and the tenant's own price of the same meter, version
// number and dimensions are priced as two lines.
func TestLinePricedSeparatesPlanCharges(t *testing.T) {
	tiered := pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{{UpTo: nil, UnitPrice: d("0.5")}}}
	own := events.ChargeRated{MeterCode: "seats", Currency: "USD", Period: "2026-11", PriceVersion: 1,
		Aggregation: "max", Pricing: &tiered, Dimensions: map[string]string{"region": "eu"}}
	plan := own
	plan.PlanCode = "pro"
	a, _, okA := LinePriced("t1", own)
	b, _, okB := LinePriced("t1", plan)
	if !okA || !okB {
		t.Fatalf("both are priced by their line: %v %v", okA, okB)
	}
	if a == b {
		t.Fatalf("one line for the tenant's price and the plan's charge: %+v", a)
	}
	if a.DimensionsKey != "region=eu" {
		t.Fatalf("the tenant's own line key is catalog.Key of its dimensions, got %q", a.DimensionsKey)
	}
}
