package app_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

func subscribe(t *testing.T, svc *app.App, tenant, plan string, at time.Time) (app.Subscription, error) {
	t.Helper()
	var s app.Subscription
	err := svc.InTx(t.Context(), func(tx pgx.Tx) error {
		var err error
		s, err = svc.Subscribe(t.Context(), tx, app.Subscribe{TenantID: tenant, PlanCode: plan, StartsAt: at, Actor: "admin@" + tenant})
		return err
	})
	return s, err
}

func unitCharge(meter, price string, dims map[string]string) events.PlanCharge {
	return events.PlanCharge{MeterCode: meter, Dimensions: dims, Pricing: pricing.UnitPricing(decimal.RequireFromString(price))}
}

// A subscriber's fact is priced, at its occurrence, by its own price for
// the meter if one is in effect, else by the charge of its plan's version
// then in effect (the most specific for its properties, in the plan's
// currency), else unpriced; a fact waits until both the tenant's and the
// plans' schedules are known through it. Subscriptions are never backdated
// nor placed inside what raters know, and a plan change ends the current
// one where the next starts.
func TestPlanPricesSubscribersWithoutTheirOwnPrice(t *testing.T) {
	t.Parallel()
	pool := bt.NewPoolConns(t, 4)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return jan20 }}, app.Config{})
	ib := bt.NewInbox(t, svc)
	decide := func(raws ...[]byte) []string { return outcomes(bt.Decide(t, pool, ib, raws...)) }
	decide(tokens.Raw(t))
	if events.ScheduleShard("t9") == events.ScheduleShard("t1") {
		t.Fatal("t1 and t9 share a shard: pick other tenants")
	}

	if _, err := subscribe(t, svc, "t1", "pro", jan20.Add(time.Hour)); err != nil {
		wantCode(t, err, domain.CodeUnknownPlan) // no version replicated yet
	} else {
		t.Fatal("subscribed to a plan billing holds no version of")
	}
	jan22 := jan20.Add(48 * time.Hour)
	v1 := bt.Plan{Code: "pro", Currency: "USD", Version: 1, EffectiveAt: jan1, KnownThrough: bt.Unknown,
		Charges: []events.PlanCharge{unitCharge("tokens", "0.002", nil), unitCharge("tokens", "0.01", map[string]string{"model": "big"})}}
	decide(v1.Raw(t), bt.Watermark{Plans: true, Seq: 1, KnownThrough: jan22}.Raw(t))

	_, err := subscribe(t, svc, "t1", "pro", jan10)
	wantCode(t, err, domain.CodeBackdated)
	noon := jan20.Add(12 * time.Hour)
	sub, err := subscribe(t, svc, "t1", "pro", noon)
	if err != nil || !sub.StartsAt.Equal(noon) {
		t.Fatalf("subscribe: %+v, %v", sub, err)
	}
	// What raters are told of t1's shard from now on covers the subscription.
	feb1 := jan1.AddDate(0, 1, 0)
	decide(bt.Watermark{Tenant: "t1", KnownThrough: feb1}.Raw(t))
	_, err = subscribe(t, svc, "t1", "basic", jan22)
	wantCode(t, err, domain.CodeUnknownPlan)
	decide(bt.Plan{Code: "basic", Currency: "USD", Version: 1, Seq: 2, EffectiveAt: jan1, KnownThrough: bt.Unknown,
		Charges: []events.PlanCharge{unitCharge("tokens", "0.001", nil)}}.Raw(t))
	_, err = subscribe(t, svc, "t1", "basic", jan22)
	wantCode(t, err, domain.CodeSchedulePublished)

	type want struct {
		plan    string
		version int64
		price   string // "" unpriced
	}
	cases := []struct {
		name     string
		u        bt.Usage
		want     want
		deferred bool
	}{
		{"before the subscription", fact("t1", "tokens", "USD", "10", jan20.Add(6*time.Hour), nil), want{}, false},
		{"plan v1 default", fact("t1", "tokens", "USD", "10", jan20.Add(13*time.Hour), nil), want{"pro", 1, "0.002"}, false},
		{"plan v1 big", fact("t1", "tokens", "USD", "10", jan20.Add(14*time.Hour), map[string]string{"model": "big"}), want{"pro", 1, "0.01"}, false},
		{"another currency", fact("t1", "tokens", "EUR", "10", jan20.Add(15*time.Hour), nil), want{}, false},
		{"past the plans' schedule", fact("t1", "tokens", "USD", "10", jan22.Add(time.Hour), nil), want{"pro", 2, ""}, true},
		{"another tenant", fact("t9", "tokens", "USD", "10", jan20.Add(13*time.Hour), nil), want{}, true},
	}
	raws := make([][]byte, len(cases))
	ids := make([]string, len(cases))
	for i, c := range cases {
		env, raw := c.u.Envelope(t)
		raws[i], ids[i] = raw, env.EventID.String()
	}
	got := decide(raws...)
	for i, c := range cases {
		if (got[i] != "applied") != c.deferred {
			t.Fatalf("%s: %s", c.name, got[i])
		}
	}
	// v2 from the 22nd, graduated: the fact past the plans' schedule waited for it.
	grad := pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
		{UpTo: ptr(bt.Dec(t, "5")), UnitPrice: bt.Dec(t, "0")}, {UnitPrice: bt.Dec(t, "0.003")}}}
	v2 := bt.Plan{Code: "pro", Currency: "USD", Version: 2, Seq: 3, EffectiveAt: jan22, KnownThrough: jan22.Add(90 * time.Minute),
		Charges: []events.PlanCharge{{MeterCode: "tokens", Pricing: grad}}}
	if got := decide(v2.Raw(t)); len(got) < 2 || got[0] != "applied" || got[1] != "applied" {
		t.Fatalf("v2 and the fact waiting for it: %v", got)
	}
	rated := ratedBy(t, pool)
	for i, c := range cases[:5] {
		var ch events.ChargeRated
		found := false
		for _, r := range rated {
			if r.UsageEventID.String() == ids[i] {
				ch, found = r, true
			}
		}
		if !found {
			t.Fatalf("%s: no charge", c.name)
		}
		switch {
		case c.want.plan == "" && (!ch.Unpriced || ch.PlanCode != ""):
			t.Errorf("%s: %s, want unpriced", c.name, bt.JSON(ch))
		case c.want.plan != "" && (ch.PlanCode != c.want.plan || ch.PriceVersion != c.want.version || ch.Unpriced):
			t.Errorf("%s: %s, want %s v%d", c.name, bt.JSON(ch), c.want.plan, c.want.version)
		case c.want.price != "" && !ch.UnitPrice.Equal(bt.Dec(t, c.want.price)):
			t.Errorf("%s: unit price %s, want %s", c.name, ch.UnitPrice, c.want.price)
		case c.want.version == 2 && (ch.Pricing == nil || ch.Pricing.Model != pricing.Graduated):
			t.Errorf("%s: %s, want v2's graduated pricing carried", c.name, bt.JSON(ch))
		}
	}
	// A plan change from the 2nd of February ends pro there.
	feb2 := feb1.Add(24 * time.Hour)
	basic, err := subscribe(t, svc, "t1", "basic", feb2)
	if err != nil {
		t.Fatal(err)
	}
	subs, err := svc.Subscriptions(t.Context(), "t1", app.SubscriptionPosition{}, 10)
	if err != nil || len(subs) != 2 || subs[0].EndsAt == nil || !subs[0].EndsAt.Equal(feb2) || subs[1].SubscriptionID != basic.SubscriptionID {
		t.Fatalf("subscriptions %s (%v), want pro ending where basic starts", bt.JSON(subs), err)
	}
	_, err = subscribe(t, svc, "t1", "pro", feb2)
	wantCode(t, err, domain.CodeSubscriptionOverlap)
}

func ptr[T any](v T) *T { return &v }

// A plan version racing usage misprices nothing (decision 0021, the way
// TestDimensionPriceRacingUsageMispricesNothing proves it for a price):
// 24 tenants in every schedule shard subscribe to "pro", whose v1 is known
// through the 15th; while their facts from the 10th to the 20th are rated
// by several consumers at once, meter publishes v2 from the 17th (after the
// plans' watermark, as meter must). Facts beyond the plans' known schedule
// wait; in the end each fact is priced by the version in effect at its
// occurrence, whatever the interleaving.
func TestPlanVersionRacingUsageMispricesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := bt.NewPoolConns(t, 8)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return jan1 }}, app.Config{})
	ib := bt.NewInbox(t, svc)
	jan17 := jan15.Add(48 * time.Hour)
	feb1 := jan1.AddDate(0, 1, 0)
	v1 := bt.Plan{Code: "pro", Currency: "USD", Version: 1, EffectiveAt: jan1, KnownThrough: jan15,
		Charges: []events.PlanCharge{unitCharge("tokens", "0.002", nil)}}
	v2 := bt.Plan{Code: "pro", Currency: "USD", Version: 2, EffectiveAt: jan17, KnownThrough: feb1,
		Charges: []events.PlanCharge{unitCharge("tokens", "0.003", nil)}}
	bt.Decide(t, pool, ib, tokens.Raw(t), v1.Raw(t))

	const subscribers, perTenant, workers = 24, 5, 4
	shards := map[int32]bool{}
	var tenants []string
	for i := range subscribers {
		tenant := fmt.Sprintf("sub%d", i)
		tenants, shards[events.ScheduleShard(tenant)] = append(tenants, tenant), true
		if _, err := subscribe(t, svc, tenant, "pro", jan1.Add(time.Hour)); err != nil {
			t.Fatalf("subscribe %s: %v", tenant, err)
		}
	}
	for _, tenant := range tenants { // then raters learn every subscriber's schedule
		bt.Decide(t, pool, ib, bt.Watermark{Tenant: tenant, KnownThrough: feb1}.Raw(t))
	}
	if len(shards) < 12 {
		t.Fatalf("the subscribers cover %d schedule shards: pick others", len(shards))
	}
	occurred := map[uuid.UUID]time.Time{}
	batches := make([][][]byte, workers)
	n := 0
	for _, tenant := range tenants {
		for range perTenant {
			at := jan10.Add(time.Duration(n) * 2 * time.Hour) // the 10th to the 20th
			env, raw := fact(tenant, "tokens", "USD", "10", at, nil).Envelope(t)
			occurred[env.EventID] = at
			batches[n%workers] = append(batches[n%workers], raw)
			n++
		}
	}
	rng := rand.New(rand.NewPCG(1, 2)) // each worker's facts out of time order
	for _, b := range batches {
		rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	start, underway := make(chan struct{}), make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for i, raw := range batches[w] {
				if _, err := bt.TryDecide(ctx, pool, ib, raw); err != nil {
					errs <- err
					return
				}
				if w == 0 && i == 3 {
					close(underway)
				}
			}
		})
	}
	wg.Go(func() { // v2 lands while facts on both sides of it are being rated
		<-underway
		if _, err := bt.TryDecide(ctx, pool, ib, v2.Raw(t)); err != nil {
			errs <- err
		}
	})
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for range 20 { // what waited while v2 committed beside it is decided by the sweep
		if bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred`) == 0 {
			break
		}
		if _, err := ib.Sweep(ctx, pool, 1000); err != nil {
			t.Fatal(err)
		}
	}
	rated := ratedBy(t, pool)
	if len(rated) != len(occurred) {
		t.Fatalf("%d charges of %d facts (%d deferred)", len(rated), len(occurred), bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred`))
	}
	before := 0
	for id, at := range occurred {
		c := rated[id]
		want, price := int64(1), "0.002"
		if !at.Before(jan17) {
			want, price = 2, "0.003"
		} else {
			before++
		}
		if c.PlanCode != "pro" || c.PriceVersion != want || c.Unpriced || !c.UnitPrice.Equal(bt.Dec(t, price)) {
			t.Errorf("fact at %s: charge %s, want pro v%d at %s", at.Format(time.RFC3339), bt.JSON(c), want, price)
		}
	}
	if before == 0 || before == len(occurred) {
		t.Fatalf("%d of %d facts before v2: the race needs both", before, len(occurred))
	}
}

// A plan's fixed fee and minimum spend are billed prorated by the whole
// days the subscription spent on it (section 3a): the estimate holds them
// as the subscriptions stand, the close carries them as fee lines, and the
// scheduler closes a subscriber's period even without a charge.
func TestFixedFeesAndMinimumSpendAreProratedAndClosed(t *testing.T) {
	t.Parallel()
	pool := bt.NewPoolConns(t, 4)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.Decide(t, pool, ib, tokens.Raw(t))
	feb15 := time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC)
	minimum := bt.Dec(t, "62.00")
	pro := bt.Plan{Code: "pro", Currency: "USD", Version: 1, EffectiveAt: jan1, KnownThrough: feb15,
		FixedFees: []events.PlanFee{{Code: "base", Name: "Base fee", Amount: bt.Dec(t, "31.00")}}, MinimumSpend: &minimum,
		Charges: []events.PlanCharge{unitCharge("tokens", "0.5", nil)}}
	bt.Decide(t, pool, ib, pro.Raw(t))
	jan17 := jan15.Add(48 * time.Hour)
	for _, tenant := range []string{"f1", "f2"} {
		if _, err := subscribe(t, svc, tenant, "pro", jan17); err != nil {
			t.Fatalf("subscribe %s: %v", tenant, err)
		}
	}
	for _, tenant := range []string{"f1", "f2"} {
		bt.Decide(t, pool, ib, bt.Watermark{Tenant: tenant, KnownThrough: feb15}.Raw(t))
	}
	bt.Decide(t, pool, ib, fact("f1", "tokens", "USD", "10", jan20, nil).Raw(t)) // 5.00 on pro's charge
	// 15 of January's 31 days: the fee 15.00, the minimum 30.00; f1's usage
	// and fee leave 10.00 short, f2's fee 15.00.
	for tenant, want := range map[string]string{"f1": "30", "f2": "30"} {
		if est := estimateOf(t, svc, tenant); !est["USD"].Equal(bt.Dec(t, want)) {
			t.Fatalf("%s estimate %s, want USD %s", tenant, bt.JSON(est), want)
		}
	}
	clk.set(time.Date(2026, 2, 1, 2, 0, 0, 0, time.UTC)) // past January's end and its hour of grace
	for range 2 {
		if _, err := svc.CloseDuePeriods(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string][]events.FeeLine{}
	for _, d := range bt.Outbox(t, pool) {
		if c, ok := d.Payload.(events.BillingPeriodClosed); ok && c.Period == "2026-01" {
			got[d.Envelope.TenantID] = c.Fees["USD"]
		}
	}
	summary := func(ls []events.FeeLine) string {
		s := ""
		for _, l := range ls {
			s += fmt.Sprintf("%s %s/%d %s %d/%d %s; ", l.Kind, l.PlanCode, l.PlanVersion, l.FeeCode, l.Days, l.PeriodDays, l.Amount)
		}
		return s
	}
	for tenant, want := range map[string]string{
		"f1": "fixed_fee pro/1 base 15/31 15; minimum_true_up pro/1  15/31 10; ",
		"f2": "fixed_fee pro/1 base 15/31 15; minimum_true_up pro/1  15/31 15; ",
	} {
		if s := summary(got[tenant]); s != want {
			t.Errorf("%s January fees %q, want %q (closes: %d)", tenant, s, want, len(got))
		}
	}
}

// After a tenant's zone moves east, its period's first day begins before
// the period does (periods tile from the previous zone's end): a plan that
// held at that day's first instant bills the day, though it ended before
// the period began.
func TestFeesOfTheFirstDayAfterAZoneMovesEast(t *testing.T) {
	t.Parallel()
	pool := bt.NewPoolConns(t, 4)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.Decide(t, pool, ib, tokens.Raw(t))
	mar1 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, p := range []bt.Plan{
		{Code: "pro", Currency: "USD", Version: 1, EffectiveAt: jan1, KnownThrough: mar1,
			FixedFees: []events.PlanFee{{Code: "base", Name: "Pro", Amount: bt.Dec(t, "28.00")}}},
		{Code: "basic", Currency: "USD", Version: 1, Seq: 2, EffectiveAt: jan1, KnownThrough: bt.Unknown,
			FixedFees: []events.PlanFee{{Code: "base", Name: "Basic", Amount: bt.Dec(t, "56.00")}}},
	} {
		wantOutcomes(t, bt.Decide(t, pool, ib, p.Raw(t)), "applied")
	}
	if got := putSettings(t, svc, "z1", "Europe/Berlin", "PT1H"); got.EffectiveFrom != "2026-02" {
		t.Fatalf("settings from %s", got.EffectiveFrom)
	}
	// February begins at 00:00 UTC (January's zone); its first day in
	// Berlin at 23:00 UTC on the 31st. pro holds then, basic from 23:30.
	change := time.Date(2026, 1, 31, 23, 30, 0, 0, time.UTC)
	for _, s := range []struct {
		plan string
		at   time.Time
	}{{"pro", jan15}, {"basic", change}} {
		if _, err := subscribe(t, svc, "z1", s.plan, s.at); err != nil {
			t.Fatalf("subscribe %s: %v", s.plan, err)
		}
	}
	est, err := svc.PeriodEstimate(t.Context(), "z1", "2026-02")
	if err != nil {
		t.Fatal(err)
	}
	// pro 28 x 1/28 + basic 56 x 27/28
	if want := bt.Dec(t, "55"); !est.Estimate["USD"].Equal(want) {
		t.Fatalf("February estimate %s, want USD %s", bt.JSON(est.Estimate), want)
	}
}
