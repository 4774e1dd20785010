package app_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// post sends an adjustment as the HTTP API does (parsed, then posted) by
// actor, and returns the rule it broke, if any.
func post(t *testing.T, svc *app.App, tenant string, charge uuid.UUID, amount, currency, actor string) (idempotency.Reply, error) {
	t.Helper()
	a, err := domain.ParseAdjustment(domain.AdjustmentRequest{
		CorrectionOf: charge.String(), Amount: amount, Currency: currency, Reason: "credit",
	})
	if err != nil {
		return idempotency.Reply{}, err
	}
	key := uuid.NewString()
	return postAdjustment(t.Context(), svc, app.Request{TenantID: tenant, Actor: actor}, key, a)
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
}

// adjusted is the sum of a tenant's adjustments in a period and currency,
// as stored, with their count.
func adjusted(t *testing.T, pool *pgxpool.Pool, tenant, period, currency string) (decimal.Decimal, int) {
	t.Helper()
	var sum decimal.Decimal
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT COALESCE(sum(amount), 0), count(*) FROM adjustment
		WHERE tenant_id = $1 AND period = $2 AND currency = $3`, tenant, period, currency).Scan(&sum, &n); err != nil {
		t.Fatal(err)
	}
	return sum, n
}

// A period's credits can't take its charges below zero, per currency; a
// credit equal to what is left is allowed; debits are never refused; a
// refused credit writes nothing.
func TestCreditsNeverExceedCharges(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	// USD: 80 x 0.0125 = 1.00; KRW: 10 x 13.7 = 137 (does not count for USD).
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), krwPrice("t1").Raw(t), usageAt("t1", 1, "80", jan10).Raw(t),
		bt.Usage{Tenant: "t1", Meter: "sms", Currency: "KRW", PriceVersion: 1, Quantity: "10", OccurredAt: jan10}.Raw(t))
	jan := charges(t, svc, "t1", "2026-01")
	usd, krw := jan[0], jan[1]
	if usd.Currency != "USD" || !usd.Amount.Equal(bt.Dec(t, "1")) || krw.Currency != "KRW" {
		t.Fatalf("charges = %s", bt.JSON(jan))
	}
	const actor = "admin@t1.example"

	outbox := len(bt.Outbox(t, pool))
	_, err := post(t, svc, "t1", usd.ChargeID, "-1.01", "USD", actor)
	wantCode(t, err, "credit_exceeds_charges")
	if sum, n := adjusted(t, pool, "t1", "2026-01", "USD"); n != 0 || len(bt.Outbox(t, pool)) != outbox {
		t.Fatalf("a refused credit wrote: adjustments %s (%d), outbox %d -> %d", sum, n, outbox, len(bt.Outbox(t, pool)))
	}

	for _, amount := range []string{"-0.40", "-0.60"} { // exactly the charges: allowed
		if _, err := post(t, svc, "t1", usd.ChargeID, amount, "USD", actor); err != nil {
			t.Fatalf("credit %s: %v", amount, err)
		}
	}
	_, err = post(t, svc, "t1", usd.ChargeID, "-0.01", "USD", actor)
	wantCode(t, err, "credit_exceeds_charges")
	// A debit is never refused, and makes room for a credit of its size.
	if _, err := post(t, svc, "t1", usd.ChargeID, "0.50", "USD", actor); err != nil {
		t.Fatalf("debit: %v", err)
	}
	if _, err := post(t, svc, "t1", usd.ChargeID, "-0.50", "USD", actor); err != nil {
		t.Fatalf("credit of the debit: %v", err)
	}
	if sum, n := adjusted(t, pool, "t1", "2026-01", "USD"); !sum.Equal(bt.Dec(t, "-1")) || n != 4 {
		t.Fatalf("USD adjustments = %s (%d), want -1.00 (4)", sum, n)
	}
	// Another currency of the same period has its own balance.
	_, err = post(t, svc, "t1", krw.ChargeID, "-138", "KRW", actor)
	wantCode(t, err, "credit_exceeds_charges")
	if _, err := post(t, svc, "t1", krw.ChargeID, "-137", "KRW", actor); err != nil {
		t.Fatalf("KRW credit of all its charges: %v", err)
	}

	// Every adjustment records its actor, in the row and in the event.
	if n := bt.Count(t, pool, `SELECT count(*) FROM adjustment WHERE actor IS DISTINCT FROM $1`, actor); n != 0 {
		t.Fatalf("%d adjustments without actor %s", n, actor)
	}
	for _, p := range bt.OfType[events.AdjustmentPosted](bt.Outbox(t, pool)) {
		if p.Actor != actor {
			t.Fatalf("AdjustmentPosted %s: actor %q, want %q", p.AdjustmentID, p.Actor, actor)
		}
	}
	// A command without an actor is refused before anything is read.
	if _, err := post(t, svc, "t1", usd.ChargeID, "1", "USD", ""); !errors.Is(err, app.ErrNoActor) {
		t.Fatalf("adjustment without actor: %v", err)
	}
}

// Concurrent credits of one period and currency are decided one at a time:
// of 20 credits of 0.07 racing against 1.00 of charges, exactly the 14
// that fit are posted, the 6 others are refused, and the balance stays at
// 0.02.
func TestConcurrentCreditsOnlyTheOnesThatFit(t *testing.T) {
	t.Parallel()
	const n = 20
	pool := bt.NewPoolConns(t, n+2)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "40", jan10).Raw(t), usageAt("t1", 1, "40", jan20).Raw(t))
	jan := charges(t, svc, "t1", "2026-01")
	if len(jan) != 2 {
		t.Fatalf("charges = %s", bt.JSON(jan))
	}

	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = post(t, svc, "t1", jan[i%2].ChargeID, "-0.07", "USD", "racer@t1.example")
		}()
	}
	close(start)
	wg.Wait()
	var posted, refused int
	for i, err := range errs {
		var de *domain.Error
		switch {
		case err == nil:
			posted++
		case errors.As(err, &de) && de.Code == "credit_exceeds_charges":
			refused++
		default:
			t.Errorf("credit %d: %v", i, err)
		}
	}
	if posted != 14 || refused != 6 {
		t.Fatalf("posted %d, refused %d; want 14 and 6", posted, refused)
	}
	if sum, count := adjusted(t, pool, "t1", "2026-01", "USD"); !sum.Equal(bt.Dec(t, "-0.98")) || count != 14 {
		t.Fatalf("adjustments = %s (%d), want -0.98 (14)", sum, count)
	}
	if got := len(bt.OfType[events.AdjustmentPosted](bt.Outbox(t, pool))); got != 14 {
		t.Fatalf("AdjustmentPosted = %d, want 14", got)
	}
}

// After the close a credit corrects the issued invoice; billing refuses at
// the API one that would take the period below zero, counting the credits
// posted before and after the close, and one finer than the currency's
// minor unit (decision 0008).
func TestCreditAfterClose(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "80", jan10).Raw(t))
	c := charges(t, svc, "t1", "2026-01")[0]
	const actor = "admin@t1.example"
	if _, err := post(t, svc, "t1", c.ChargeID, "-0.30", "USD", actor); err != nil {
		t.Fatal(err)
	}
	closePeriod(t, svc, "t1", "2026-01", "close")
	outbox := len(bt.Outbox(t, pool))

	_, err := post(t, svc, "t1", c.ChargeID, "-0.005", "USD", actor)
	wantCode(t, err, "amount_precision")
	_, err = post(t, svc, "t1", c.ChargeID, "-0.71", "USD", actor)
	wantCode(t, err, "credit_exceeds_charges")
	if sum, n := adjusted(t, pool, "t1", "2026-01", "USD"); !sum.Equal(bt.Dec(t, "-0.3")) || n != 1 || len(bt.Outbox(t, pool)) != outbox {
		t.Fatalf("refused credits wrote: adjustments %s (%d), outbox %d -> %d", sum, n, outbox, len(bt.Outbox(t, pool)))
	}
	if _, err := post(t, svc, "t1", c.ChargeID, "-0.70", "USD", actor); err != nil {
		t.Fatalf("credit of what is left after the close: %v", err)
	}
	posted := bt.OfType[events.AdjustmentPosted](bt.Outbox(t, pool))
	last := posted[len(posted)-1]
	if !last.AfterClose || !last.Amount.Equal(bt.Dec(t, "-0.70")) || last.Actor != actor {
		t.Fatalf("after-close credit = %s", bt.JSON(last))
	}
	_, err = post(t, svc, "t1", c.ChargeID, "-0.01", "USD", actor)
	wantCode(t, err, "credit_exceeds_charges")

	// The close records its actor too, in the event and in the row.
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Actor != "closer@t1.example" {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM billing_period WHERE tenant_id = 't1' AND period = '2026-01'
		AND status = 'closed' AND closed_by = 'closer@t1.example'`); n != 1 {
		t.Fatalf("closed periods by closer@t1.example = %d", n)
	}
	req := closeRequest("t1")
	req.Actor = ""
	if _, err := svc.ClosePeriod(t.Context(), req, "2026-02", closeKey("t1", "2026-02", "close-feb")); !errors.Is(err, app.ErrNoActor) {
		t.Fatalf("close without actor: %v", err)
	}
}

// Under graduated and volume pricing a charge has no amount of its own:
// a credit is checked against the lines priced by their versions. A volume
// line can fall as usage grows into a cheaper tier, so a credit is checked
// against the least the line can come to: it stays covered whatever is
// rated after it.
func TestCreditsAgainstPricedLines(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	dec := decimal.RequireFromString
	upTo := func(s string) *decimal.Decimal { v := dec(s); return &v }
	// Graduated: the first 10 free, then 1.00 each. Volume: 1.00 each up
	// to 100, 0.50 each for every unit once past 100.
	grad := &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
		{UpTo: upTo("10"), UnitPrice: dec("0")}, {UnitPrice: dec("1")}}}
	vol := &pricing.Pricing{Model: pricing.Volume, Tiers: []pricing.Tier{
		{UpTo: upTo("100"), UnitPrice: dec("1")}, {UnitPrice: dec("0.5")}}}
	use := func(meter, currency, qty string) []byte {
		return bt.Usage{Tenant: "t1", Meter: meter, Currency: currency, Quantity: qty, OccurredAt: jan10}.Raw(t)
	}
	bt.Decide(t, pool, ib,
		bt.Price{Tenant: "t1", Meter: "api_calls", Currency: "EUR", Version: 1, EffectiveAt: jan1, Pricing: grad}.Raw(t),
		bt.Price{Tenant: "t1", Meter: "storage", Currency: "USD", Version: 1, EffectiveAt: jan1, Pricing: vol}.Raw(t),
		use("api_calls", "EUR", "15"), use("storage", "USD", "100"))
	jan := charges(t, svc, "t1", "2026-01")
	if len(jan) != 2 {
		t.Fatalf("charges = %s", bt.JSON(jan))
	}
	byCurrency := map[string]uuid.UUID{jan[0].Currency: jan[0].ChargeID, jan[1].Currency: jan[1].ChargeID}
	const actor = "admin@t1.example"

	// Graduated, 15 units: 5.00.
	_, err := post(t, svc, "t1", byCurrency["EUR"], "-5.01", "EUR", actor)
	wantCode(t, err, "credit_exceeds_charges")
	if _, err := post(t, svc, "t1", byCurrency["EUR"], "-5", "EUR", actor); err != nil {
		t.Fatalf("EUR credit of the graduated line: %v", err)
	}
	// Volume, 100 units: 100.00 today, but one more unit makes it 50.50:
	// only what the line can never fall below is credited.
	_, err = post(t, svc, "t1", byCurrency["USD"], "-50.01", "USD", actor)
	wantCode(t, err, "credit_exceeds_charges")
	if _, err := post(t, svc, "t1", byCurrency["USD"], "-50", "USD", actor); err != nil {
		t.Fatalf("USD credit of the volume line's floor: %v", err)
	}
	bt.Decide(t, pool, ib, use("storage", "USD", "1"))
	if _, err := post(t, svc, "t1", byCurrency["USD"], "-0.50", "USD", actor); err != nil {
		t.Fatalf("USD credit of what 101 units leave: %v", err)
	}
	_, err = post(t, svc, "t1", byCurrency["USD"], "-0.01", "USD", actor)
	wantCode(t, err, "credit_exceeds_charges")
	est, err := svc.PeriodEstimate(t.Context(), "t1", "2026-01")
	if err != nil {
		t.Fatal(err)
	}
	// The estimate counts the adjustments the close will; all were posted
	// before it: the period is at exactly zero in both currencies.
	if !est.Estimate["USD"].IsZero() || !est.Estimate["EUR"].IsZero() {
		t.Fatalf("estimate %s, want USD 0 and EUR 0", bt.JSON(est))
	}
}

// A credit's check reads the period's lines from their parts (a few rows
// a line, whatever the period's charges number) and still weighs every
// charge: 10 USD charges of 1.00 rated in 10 batches, their parts folded
// past two, and a KRW one allow a credit of exactly 10.00 and refuse one
// of 10.01.
func TestCreditCheckReadsLinesFromParts(t *testing.T) {
	t.Parallel()
	const foldAt = 2
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{PartsFoldAt: foldAt})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), krwPrice("t1").Raw(t),
		bt.Usage{Tenant: "t1", Meter: "sms", Currency: "KRW", PriceVersion: 1, Quantity: "10", OccurredAt: jan10}.Raw(t))
	for range 10 {
		bt.Decide(t, pool, ib, usageAt("t1", 1, "80", jan10).Raw(t)) // 80 x 0.0125 = 1.00
	}
	jan := charges(t, svc, "t1", "2026-01")
	if len(jan) != 11 {
		t.Fatalf("%d charges, want 11", len(jan))
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge_line_part WHERE tenant_id = 't1' AND currency = 'USD'`); n > foldAt+1 {
		t.Fatalf("the USD line has %d parts after 10 batches, want at most %d", n, foldAt+1)
	}
	usd := jan[0]
	_, err := post(t, svc, "t1", usd.ChargeID, "-10.01", "USD", "admin@t1.example")
	wantCode(t, err, "credit_exceeds_charges")
	if _, err := post(t, svc, "t1", usd.ChargeID, "-10.00", "USD", "admin@t1.example"); err != nil {
		t.Fatalf("credit of all the charges: %v", err)
	}
}
