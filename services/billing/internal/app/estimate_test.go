package app_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// Graduated and package versions rate charges without amounts of their own
// (their ChargeRated carries the version's pricing instead), and the
// period's estimate prices each version's quantity as a whole, plus the
// unit charges' exact amounts and the adjustments.
func TestOtherModelsAndThePeriodEstimate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return jan20 }}, app.Config{}) // January in progress
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	dec := decimal.RequireFromString
	upTo := func(s string) *decimal.Decimal { v := dec(s); return &v }
	size, price := dec("100"), dec("2.5")
	grad := &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
		{UpTo: upTo("1000"), UnitPrice: dec("0")}, {UpTo: upTo("5000"), UnitPrice: dec("0.002"), FlatFee: dec("1")},
		{UnitPrice: dec("0.001")}}}
	pkg := &pricing.Pricing{Model: pricing.Package, PackageSize: &size, PackagePrice: &price}
	use := func(meter, qty string) []byte {
		return bt.Usage{Tenant: "t1", Meter: meter, Currency: "USD", Quantity: qty, OccurredAt: jan10}.Raw(t)
	}
	wantOutcomes(t, bt.Decide(t, pool, ib,
		bt.Price{Tenant: "t1", Meter: "api_calls", Currency: "USD", Version: 1, EffectiveAt: jan1, Pricing: grad}.Raw(t),
		bt.Price{Tenant: "t1", Meter: "storage", Currency: "USD", Version: 1, EffectiveAt: jan1, Pricing: pkg}.Raw(t),
		bt.Price{Tenant: "t1", Meter: "sms", Currency: "USD", Version: 1, UnitPrice: "0.05", EffectiveAt: jan1}.Raw(t),
		use("api_calls", "600"), use("api_calls", "700"), use("storage", "150"), use("storage", "60"), use("sms", "3")),
		"applied", "applied", "applied", "applied", "applied", "applied", "applied", "applied")

	rated := bt.OfType[events.ChargeRated](bt.Outbox(t, pool))
	if len(rated) != 5 {
		t.Fatalf("%d ChargeRated, want 5", len(rated))
	}
	for _, c := range rated {
		switch c.MeterCode {
		case "sms":
			if c.Model != "" || c.Pricing != nil || !c.Amount.Equal(dec("0.15")) {
				t.Errorf("unit charge %s", bt.JSON(c))
			}
		default:
			if c.Pricing == nil || c.Model != c.Pricing.Model || !c.Amount.IsZero() || !c.UnitPrice.IsZero() {
				t.Errorf("%s charge %s: want its pricing and no amount", c.MeterCode, bt.JSON(c))
			}
		}
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE model <> 'unit' AND amount = 0 AND unit_price = 0`); n != 4 {
		t.Fatalf("%d graduated and package charges without amount, want 4", n)
	}

	// The charges list shows amounts under unit pricing only.
	charges, err := svc.ListCharges(ctx, "t1", app.ChargeFilter{Period: "2026-01"}, app.ChargePosition{}, 100)
	if err != nil || len(charges) != 5 {
		t.Fatalf("charges %d, %v", len(charges), err)
	}
	for _, c := range charges {
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		hasAmount := strings.Contains(string(raw), `"amount"`) && strings.Contains(string(raw), `"unitPrice"`)
		if hasAmount != (c.Model == "unit") || !strings.Contains(string(raw), `"model":"`+c.Model+`"`) {
			t.Errorf("charge of %s shown as %s", c.MeterCode, raw)
		}
	}

	est, err := svc.PeriodEstimate(ctx, "t1", "2026-01")
	if err != nil {
		t.Fatal(err)
	}
	// api_calls 1300: 1000 free + 300 x 0.002 + 1 = 1.6; storage 210: 3
	// packages x 2.5 = 7.5; sms 3 x 0.05 = 0.15.
	closesAt := time.Date(2026, 2, 1, 1, 0, 0, 0, time.UTC) // its end in UTC plus the default hour of grace
	if est.Status != "open" || est.ClosesAt == nil || !est.ClosesAt.Equal(closesAt) || len(est.Estimate) != 1 ||
		!est.Estimate["USD"].Equal(dec("9.25")) {
		t.Fatalf("estimate %s, want open, closing at %s, USD 9.25", bt.JSON(est), closesAt)
	}
	empty, err := svc.PeriodEstimate(ctx, "t1", "2026-02")
	if err != nil || empty.Status != "open" || len(empty.Estimate) != 0 {
		t.Fatalf("estimate of an empty period %s, %v", bt.JSON(empty), err)
	}
}
