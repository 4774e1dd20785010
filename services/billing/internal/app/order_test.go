package app_test

import (
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/events"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// Periods close in order (decision 0014): a close is refused while an
// earlier period with charges is open, a period with none does not hold
// a later one back, its usage after the later close is late past it, and
// each BillingPeriodClosed names the period closed before it.
func TestPeriodsCloseInOrder(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	mar5 := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)
	clk := newClock(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)) // March in progress
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "4", jan10).Raw(t), usageAt("t1", 1, "2", mar5).Raw(t))

	// March while January (charged) is open: refused, nothing written.
	if _, err := tryClose(t.Context(), svc, "t1", "2026-03", "k-mar"); codeOf(err) != "earlier_period_open" {
		t.Fatalf("close of March before January: %v, want earlier_period_open", err)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM billing_period WHERE period = '2026-03'`); n != 0 {
		t.Fatalf("a refused close wrote %d period rows", n)
	}
	closePeriod(t, svc, "t1", "2026-01", "k-jan")
	// February has no charge: it does not hold March back.
	closePeriod(t, svc, "t1", "2026-03", "k-mar")
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 2 || closes[0].PreviousPeriod != "" || closes[1].Period != "2026-03" || closes[1].PreviousPeriod != "2026-01" {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
	// Usage of February after March closed is late, into April: February
	// can no longer bill after March.
	wantOutcomes(t, bt.Decide(t, pool, ib, usageAt("t1", 1, "1", feb3).Raw(t)), "applied")
	if apr := charges(t, svc, "t1", "2026-04"); len(apr) != 1 || !apr[0].Late {
		t.Fatalf("April charges = %s, want February's one, late", bt.JSON(apr))
	}
	if feb := charges(t, svc, "t1", "2026-02"); len(feb) != 0 {
		t.Fatalf("February took a charge after March closed: %s", bt.JSON(feb))
	}
	// An empty February still closes (nothing to issue), after March.
	closePeriod(t, svc, "t1", "2026-02", "k-feb")
	closes = bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 3 || closes[2].Period != "2026-02" || closes[2].PreviousPeriod != "2026-01" || closes[2].Charges != 0 {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
}

// The scheduler closes a tenant's due periods in period order, a period of
// fees only among them, and leaves a later period for a pass after the
// earlier one closed: a fee-only January holds February's close back.
func TestSchedulerClosesInPeriodOrder(t *testing.T) {
	t.Parallel()
	pool := bt.NewPoolConns(t, 4)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.Decide(t, pool, ib, tokens.Raw(t))
	fee := bt.Plan{Code: "base", Currency: "USD", Version: 1, EffectiveAt: jan1, KnownThrough: bt.FarFuture,
		FixedFees: []events.PlanFee{{Code: "base", Name: "Base fee", Amount: bt.Dec(t, "31.00")}},
		Charges:   []events.PlanCharge{unitCharge("tokens", "0.5", nil)}}
	bt.Decide(t, pool, ib, fee.Raw(t))
	if _, err := subscribe(t, svc, "s1", "base", jan20); err != nil {
		t.Fatal(err)
	}
	bt.Decide(t, pool, ib, bt.Watermark{Tenant: "s1", KnownThrough: bt.FarFuture}.Raw(t))
	bt.Decide(t, pool, ib, fact("s1", "tokens", "USD", "10", feb3, nil).Raw(t)) // February is charged, January is fees only

	// February closed explicitly while January (fees) is open: refused.
	clk.set(feb3.Add(24 * time.Hour))
	if _, err := tryClose(t.Context(), svc, "s1", "2026-02", "k-feb"); codeOf(err) != "earlier_period_open" {
		t.Fatalf("close of February before a fee-only January: %v, want earlier_period_open", err)
	}
	// Both due: one pass closes January, then February.
	clk.set(time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC))
	run, err := svc.CloseDuePeriods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Closed) != 2 || run.Closed[0] != "s1/2026-01" || run.Closed[1] != "s1/2026-02" {
		t.Fatalf("pass closed %v, want January then February", run.Closed)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 2 || closes[0].Period != "2026-01" || len(closes[0].Fees["USD"]) == 0 ||
		closes[1].Period != "2026-02" || closes[1].PreviousPeriod != "2026-01" {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
}
