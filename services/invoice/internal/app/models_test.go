package app_test

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/pricing"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// Charges of graduated, volume and package versions carry no amounts: their
// lines are priced by the version over the line's quantity, while the
// invoice is open (live lines) and at issue (stored lines); unit lines are
// their charges' sums; the total is rounded once.
func TestLinesPricedByTheirVersionsModel(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	upTo := func(s string) *decimal.Decimal { v := D(s); return &v }
	tiers := []pricing.Tier{{UpTo: upTo("1000"), UnitPrice: D("0")}, {UpTo: upTo("10000"), UnitPrice: D("0.002"), FlatFee: D("1")},
		{UnitPrice: D("0.001")}}
	size, price := D("100"), D("2.5")
	grad := pricing.Pricing{Model: pricing.Graduated, Tiers: tiers}
	vol := pricing.Pricing{Model: pricing.Volume, Tiers: tiers}
	pkg := pricing.Pricing{Model: pricing.Package, PackageSize: &size, PackagePrice: &price}
	envs := []envelope.Envelope{
		p.ChargePriced("USD", "api_calls", 1, "6000", grad), p.ChargePriced("USD", "api_calls", 1, "6006", grad),
		p.ChargePriced("USD", "messages", 1, "2000", vol),
		p.ChargePriced("USD", "storage_gb", 1, "150", pkg), p.ChargePriced("USD", "storage_gb", 1, "60.75", pkg),
		p.ChargeOf("USD", "sms", 1, "3", "0.05"),
	}
	closed := p.Close()
	Decide(t, pool, ib, envs...)

	// api_calls 12,006: 0 + 9,000 x 0.002 + 1 + 2,006 x 0.001 = 21.006;
	// messages 2,000 by volume: 2,000 x 0.002 + 1 = 5; storage 210.75 GB:
	// 3 packages = 7.5; sms 3 x 0.05 = 0.15. Subtotal 33.656.
	want := []string{"charge/api_calls/1 12006/2 21.006", "charge/messages/1 2000/1 5", "charge/sms/1 3/1 0.15",
		"charge/storage_gb/1 210.75/2 7.5"}
	open := invoices(t, pool, "acme", "2026-11")["USD"]
	wantLines(t, open, want...)
	if !open.Subtotal.Equal(D("33.656")) {
		t.Fatalf("open invoice subtotal %s, want 33.656", open.Subtotal)
	}

	Decide(t, pool, ib, closed)
	issued := invoices(t, pool, "acme", "2026-11")["USD"]
	wantLines(t, issued, append(want, "rounding 0.004")...)
	if issued.Status != "issued" || !issued.Subtotal.Equal(D("33.656")) || !issued.Total.Equal(D("33.66")) {
		t.Fatalf("issued invoice %s subtotal %s total %v, want 33.656 and 33.66", issued.Status, issued.Subtotal, issued.Total)
	}
}
