package money

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"time"

	"github.com/shopspring/decimal"
)

// Plan is a catalog plan as meter answered its versions (DESIGN.md section
// 3a, decision 0021): one currency, versions in version order, each with
// its charges over catalog meters. Plans belong to the run (their codes
// start with its prefix), not to a tenant.
type Plan struct {
	Code, Currency string
	Versions       []PlanVersion
}

// PlanVersion is one published version of a plan.
type PlanVersion struct {
	N       int64
	Eff     time.Time
	Charges []PlanCharge
	Fees    []Fee            // fixed fees per period
	Min     *decimal.Decimal // minimum spend per period, nil for none
}

// PlanCharge is a plan version's price of a meter for the facts whose
// properties equal Dims (none: every fact of the meter).
type PlanCharge struct {
	Meter   string
	Dims    map[string]string
	Pricing Pricing
}

// inEffect is the plan's version in effect at t: the highest whose
// effectiveAt is at or before t (versions take effect in version order);
// nil before the first.
func (p *Plan) inEffect(t time.Time) *PlanVersion {
	var best *PlanVersion
	for i := range p.Versions {
		if v := &p.Versions[i]; !v.Eff.After(t) && (best == nil || v.N > best.N) {
			best = v
		}
	}
	return best
}

func (p *Plan) version(n int64) *PlanVersion {
	for i := range p.Versions {
		if p.Versions[i].N == n {
			return &p.Versions[i]
		}
	}
	return nil
}

// charge is the version's charge of meter that prices a fact with props:
// the most specific whose values all equal its properties (ties: the
// smaller dimension key; a version never holds two that could tie); nil
// for none.
func (v *PlanVersion) charge(meter string, props map[string]string) *PlanCharge {
	var best *PlanCharge
	for i := range v.Charges {
		c := &v.Charges[i]
		if c.Meter != meter || !dimsMatch(c.Dims, props) {
			continue
		}
		if best == nil || len(c.Dims) > len(best.Dims) ||
			(len(c.Dims) == len(best.Dims) && dimsKey(c.Dims) < dimsKey(best.Dims)) {
			best = c
		}
	}
	return best
}

// chargeOf is the version's charge of meter whose dimensions have the
// dimsKey dims.
func (v *PlanVersion) chargeOf(meter, dims string) *PlanCharge {
	for i := range v.Charges {
		if c := &v.Charges[i]; c.Meter == meter && dimsKey(c.Dims) == dims {
			return c
		}
	}
	return nil
}

// Subscription is a tenant's subscription to a plan from Start until End
// (zero: open).
type Subscription struct {
	ID, Plan   string
	Start, End time.Time
}

func (s *Subscription) holds(t time.Time) bool {
	return !s.Start.After(t) && (s.End.IsZero() || s.End.After(t))
}

// subscriptionAt is the tenant's subscription in effect at t (the latest
// started: a plan change ends the one before where the next starts, so at
// most one holds); nil for none.
func (t *Tenant) subscriptionAt(at time.Time) *Subscription {
	var best *Subscription
	for _, s := range t.Subs {
		if mutation == "change-keeps-old" { // a deliberately wrong model: a plan change leaves the old plan pricing
			if !s.Start.After(at) && (best == nil || s.Start.Before(best.Start)) {
				best = s
			}
			continue
		}
		if s.holds(at) && (best == nil || s.Start.After(best.Start)) {
			best = s
		}
	}
	return best
}

// rate decides what prices fact f (section 3a): the tenant's own price
// entry in effect at its occurrence for its properties, else the charge of
// the plan of the subscription then in effect, in that plan's version then
// in effect, when the plan is in the fact's currency; else unpriced.
func (t *Tenant) rate(f *Fact, s *Series) {
	own := func() bool {
		if s == nil {
			return false
		}
		v := s.inEffect(f.At, f.Props)
		if v == nil {
			return false
		}
		f.Version, f.Dims, f.Plan = v.N, v.Dims, ""
		return true
	}
	plan := func() bool {
		sub := t.subscriptionAt(f.At)
		if sub == nil {
			return false
		}
		p := t.plans[sub.Plan]
		if p.Currency != f.Currency {
			return false
		}
		v := p.inEffect(f.At)
		if v == nil {
			return false
		}
		c := v.charge(f.Meter, f.Props)
		if c == nil {
			return false
		}
		f.Version, f.Dims, f.Plan = v.N, c.Dims, p.Code
		return true
	}
	if mutation == "plan-over-own" { // a deliberately wrong model: the plan's charge wins over the tenant's own price
		_ = plan() || own()
		return
	}
	_ = own() || plan()
}

// pricing is the pricing of a line's price: the tenant's own version, or
// the plan version's charge of the line's meter and dimensions.
func (t *Tenant) pricing(k lineKey) Pricing {
	if k.Plan == "" {
		return t.Series[k.Meter].version(k.Version).Pricing
	}
	v := t.plans[k.Plan].version(k.Version)
	c := v.chargeOf(k.Meter, k.Dims)
	if c == nil {
		panic(fmt.Sprintf("%s: plan %s v%d holds no charge of %s {%s}", t.ID, k.Plan, k.Version, k.Meter, k.Dims))
	}
	return c.Pricing
}

// planMeters are the meters the latest version of the plan of the tenant's
// latest subscription charges for (none without a subscription).
func (t *Tenant) planMeters() []string {
	if len(t.Subs) == 0 {
		return nil
	}
	p := t.plans[t.Subs[len(t.Subs)-1].Plan]
	set := map[string]bool{}
	for _, c := range p.Versions[len(p.Versions)-1].Charges {
		set[c.Meter] = true
	}
	return sortedKeys(set)
}

// ---- operations ----

// planMeters are the catalog meters a plan in currency c may charge for:
// those the test bills in c.
func planMeters(c string) []meterDefinition {
	var out []meterDefinition
	for _, m := range meters {
		if m.Catalog && m.Currency == c {
			out = append(out, m)
		}
	}
	return out
}

// planCurrencies are the currencies plans are published in.
var planCurrencies = []string{"USD", "USD", "EUR", "KRW"}

// randomCharges picks a version's charges in currency c: some of the
// currency's meters, each with a charge for every fact or not, and for a
// meter with dimensions up to two charges of distinct values of its first
// dimension (never two that could price the same fact equally: a plan
// with such is refused ambiguous_price, which the catalog tests cover).
func (r *runner) randomCharges(c string) []PlanCharge {
	var out []PlanCharge
	for _, m := range planMeters(c) {
		if r.rng.IntN(4) == 0 {
			continue
		}
		if len(m.Dims) == 0 || r.rng.IntN(3) > 0 {
			out = append(out, PlanCharge{Meter: m.Code, Pricing: randomPricing(r.rng, c)})
		}
		if len(m.Dims) > 0 {
			vals := propertyValues[m.Dims[0]]
			for _, i := range r.rng.Perm(len(vals))[:r.rng.IntN(3)] {
				out = append(out, PlanCharge{Meter: m.Code, Dims: map[string]string{m.Dims[0]: vals[i]}, Pricing: randomPricing(r.rng, c)})
			}
		}
	}
	if len(out) == 0 {
		m := planMeters(c)[0]
		out = append(out, PlanCharge{Meter: m.Code, Pricing: randomPricing(r.rng, c)})
	}
	return out
}

// randomFees picks a version's fixed fees (none, one or two, whole minor
// units of c) and its minimum spend (mostly none).
func (r *runner) randomFees(c string) ([]Fee, *decimal.Decimal) {
	amount := func() decimal.Decimal {
		return decimal.New(int64(1+r.rng.IntN(20000)), -minor(c))
	}
	var fees []Fee
	for i := range r.rng.IntN(3) {
		fees = append(fees, Fee{Code: fmt.Sprintf("fee%d", i+1), Amount: amount()})
	}
	if r.rng.IntN(3) > 0 {
		return fees, nil
	}
	m := amount().Add(amount())
	return fees, &m
}

type planAnswer struct {
	Code        string    `json:"code"`
	Version     int64     `json:"version"`
	Currency    string    `json:"currency"`
	EffectiveAt time.Time `json:"effectiveAt"`
}

// publishPlan publishes a new plan (a fresh code of the run) or the next
// version of one of the run's plans, now (after the plans' published
// schedule), later, backdated (price_backdated) or before the plan's last
// version (price_out_of_order).
func (r *runner) publishPlan(ctx context.Context) error {
	var p *Plan
	if codes := sortedKeys(r.plans); len(codes) > 0 && r.rng.IntN(3) > 0 {
		p = r.plans[codes[r.rng.IntN(len(codes))]]
	} else {
		c := pickString(r.rng, planCurrencies)
		p = &Plan{Code: fmt.Sprintf("%s-plan%d", r.cfg.Prefix, len(r.plans)+1), Currency: c}
	}
	charges := r.randomCharges(p.Currency)
	fees, minimum := r.randomFees(p.Currency)
	now := instant(r.now())
	safe := now.Add(r.cfg.Lead + 2*time.Second)
	var last time.Time
	if n := len(p.Versions); n > 0 {
		last = p.Versions[n-1].Eff
	}
	how, eff, wantStatus, wantCode := "future", time.Time{}, 201, ""
	switch x := r.rng.IntN(100); {
	case x < 45 && !last.After(now.Add(-time.Millisecond)):
		how = "now"
	case x < 55:
		how, eff, wantStatus, wantCode = "backdated", now.Add(-time.Duration(1+r.rng.IntN(600))*time.Second), 422, "price_backdated"
	case x < 62 && last.After(safe.Add(2*time.Millisecond)):
		how, wantStatus, wantCode = "out-of-order", 422, "price_out_of_order"
		eff = instant(safe.Add(time.Duration(r.rng.Int64N(int64(last.Sub(safe))-1000)) + time.Microsecond))
	default:
		eff = instant(maxTime(safe, last).Add(time.Duration(r.rng.Int64N(int64(4 * time.Second)))))
	}
	either := false
	if wantStatus == 201 {
		var full bool
		if full, either = r.planLimit(p, eff); full && !either {
			wantStatus, wantCode = 422, "limit_exceeded"
		}
	}
	body := map[string]any{"code": p.Code, "name": "money " + p.Code, "currency": p.Currency}
	var cs []map[string]any
	for _, c := range charges {
		b := c.Pricing.request()
		b["meterCode"] = c.Meter
		if len(c.Dims) > 0 {
			b["dimensions"] = c.Dims
		}
		cs = append(cs, b)
	}
	body["charges"] = cs
	var fs []map[string]any
	for _, f := range fees {
		fs = append(fs, map[string]any{"code": f.Code, "name": "fee " + f.Code, "amount": f.Amount.String()})
	}
	if len(fs) > 0 {
		body["fixedFees"] = fs
	}
	if minimum != nil {
		body["minimumSpend"] = minimum.String()
	}
	if !eff.IsZero() {
		body["effectiveAt"] = eff.Format(time.RFC3339Nano)
	}
	r.stats.PlanVersions++
	sent := instant(r.now())
	a, err := r.c.catalog(ctx, "POST", "/v1/plans", body, map[string]string{"Idempotency-Key": r.key("plan")})
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("#%d publish plan %s %s %d charges, fees %v, minimum %v (%s", r.step, p.Code, p.Currency, len(charges), fees, minimum, how)
	if !eff.IsZero() {
		desc += " " + eff.Format(time.RFC3339Nano)
	}
	if either && a.Status == 422 && a.Code() == "limit_exceeded" {
		wantStatus, wantCode = 422, "limit_exceeded" // its month was the full one
	}
	if wantCode == "limit_exceeded" && a.Status == wantStatus && a.Code() == wantCode {
		r.stats.PlansAtMonth++
	}
	if a.Status != wantStatus || (wantCode != "" && a.Code() != wantCode) {
		r.note("%s) -> %d %s", desc, a.Status, a.Code())
		return fail("plan", "plan %s: want %d %s, got %d %s", p.Code, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus != 201 {
		r.note("%s) -> %d %s", desc, a.Status, a.Code())
		return nil
	}
	var got planAnswer
	if err := a.decode(&got); err != nil {
		return err
	}
	if want := int64(len(p.Versions) + 1); got.Version != want || got.Code != p.Code || got.Currency != p.Currency {
		return fail("plan", "plan %s: want version %d in %s, got %s", p.Code, want, p.Currency, clip(string(a.Body)))
	}
	if !eff.IsZero() && !got.EffectiveAt.Equal(eff) {
		return fail("plan", "plan %s: asked effectiveAt %s, got %s", p.Code, eff, got.EffectiveAt)
	}
	if eff.IsZero() && (got.EffectiveAt.Before(sent) || got.EffectiveAt.After(instant(r.now()).Add(r.cfg.Lead+time.Second))) {
		return fail("plan", "plan %s: effectiveAt %s of a version published now (%s) is not within the schedule lead %s",
			p.Code, got.EffectiveAt, sent, r.cfg.Lead)
	}
	p.Versions = append(p.Versions, PlanVersion{N: got.Version, Eff: got.EffectiveAt.UTC(), Charges: charges, Fees: fees, Min: minimum})
	r.plans[p.Code] = p
	r.note("%s) -> v%d effective %s", desc, got.Version, got.EffectiveAt.UTC().Format(time.RFC3339Nano))
	return nil
}

type subscriptionAnswer struct {
	SubscriptionID string     `json:"subscriptionId"`
	PlanCode       string     `json:"planCode"`
	StartsAt       time.Time  `json:"startsAt"`
	EndsAt         *time.Time `json:"endsAt"`
}

// subscribe subscribes t to one of the run's plans (publishing one first
// if there is none): as soon as it may, later, or backdated (refused); a
// start at or before a subscription that holds then or later is refused
// subscription_overlap, and the one in effect at the start ends there.
func (r *runner) subscribe(ctx context.Context, t *Tenant) error {
	if len(r.plans) == 0 {
		r.note("#%d subscribe %s: no plan yet, publishing one", r.step, t.ID)
		if err := r.publishPlan(ctx); err != nil {
			return err
		}
		if len(r.plans) == 0 {
			return nil
		}
	}
	codes := sortedKeys(r.plans)
	p := r.plans[codes[r.rng.IntN(len(codes))]]
	now := instant(r.now())
	safe := now.Add(r.cfg.Lead + 2*time.Second)
	var latest time.Time // the latest start of a subscription that holds at or after now
	for _, s := range t.Subs {
		if s.End.IsZero() || s.End.After(now) {
			latest = maxTime(latest, s.Start)
		}
	}
	how, at := "future", time.Time{}
	switch x := r.rng.IntN(100); {
	case x < 45 && latest.Before(now.Add(-time.Millisecond)):
		how = "now"
	case x < 55:
		how, at = "backdated", now.Add(-time.Duration(1+r.rng.IntN(600))*time.Second)
	case x < 62 && latest.After(safe.Add(2*time.Millisecond)):
		how, at = "before the last start", instant(safe.Add(time.Duration(r.rng.Int64N(int64(latest.Sub(safe))-1000))+time.Microsecond))
	default:
		at = instant(maxTime(safe, latest).Add(time.Duration(1 + r.rng.Int64N(int64(4*time.Second)))))
	}
	// expect is the answer when billing's now is in the period of asked.
	expect := func(asked time.Time) (int, string) {
		switch {
		case how == "backdated":
			return 422, "backdated"
		case t.subscriptionsFrom(asked) >= maxSubscriptions:
			return 422, "limit_exceeded"
		case !at.IsZero():
			for _, s := range t.Subs {
				if (s.End.IsZero() || s.End.After(at)) && !s.Start.Before(at) {
					return 409, "subscription_overlap"
				}
			}
		}
		return 201, ""
	}
	wantStatus, wantCode := expect(now)
	body := map[string]any{"planCode": p.Code}
	if !at.IsZero() {
		body["startsAt"] = at.Format(time.RFC3339Nano)
	}
	r.stats.Subscriptions++
	desc := fmt.Sprintf("#%d subscribe %s to %s (%s", r.step, t.ID, p.Code, how)
	if !at.IsZero() {
		desc += " " + at.Format(time.RFC3339Nano)
	}
	sent := instant(r.now())
	deadline := time.Now().Add(r.cfg.Settle)
	var a answer
	for {
		var err error
		a, err = r.c.do(ctx, "billing", "POST", t.ID, "/subscriptions", body, map[string]string{"Idempotency-Key": r.key("subscribe")})
		if err != nil {
			return err
		}
		// billing learns a plan published a moment ago from meter's event
		if a.Status != 422 || a.Code() != "unknown_plan" || time.Now().After(deadline) {
			break
		}
		// polled: billing learns the plan from meter's event
		time.Sleep(50 * time.Millisecond)
		if how == "now" {
			sent = instant(r.now())
		}
	}
	if st, c := expect(instant(r.now())); st != wantStatus && a.Status == st && a.Code() == c {
		wantStatus, wantCode = st, c // a period began while it was asked
	}
	if wantCode == "limit_exceeded" && a.Status == 422 && a.Code() == wantCode {
		r.stats.SubscriptionsAtLimit++
	}
	if a.Status != wantStatus || a.Code() != wantCode {
		r.note("%s) -> %d %s", desc, a.Status, a.Code())
		return fail("subscription", "%s to %s: want %d %s, got %d %s", t.ID, p.Code, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus != 201 {
		r.note("%s) -> %d %s", desc, a.Status, a.Code())
		return nil
	}
	var got subscriptionAnswer
	if err := a.decode(&got); err != nil {
		return err
	}
	start := got.StartsAt.UTC()
	if got.PlanCode != p.Code || got.EndsAt != nil || (!at.IsZero() && !start.Equal(at)) {
		return fail("subscription", "%s to %s at %v: got %s", t.ID, p.Code, at, clip(string(a.Body)))
	}
	if at.IsZero() && (start.Before(sent) || start.After(instant(r.now()).Add(r.cfg.Lead+time.Second))) {
		return fail("subscription", "%s to %s: startsAt %s of a subscription from now (%s) is not within the schedule lead %s",
			t.ID, p.Code, start, sent, r.cfg.Lead)
	}
	for _, s := range t.Subs {
		if s.holds(start) {
			s.End = start // the plan change
		}
	}
	t.Subs = append(t.Subs, &Subscription{ID: got.SubscriptionID, Plan: p.Code, Start: start})
	r.note("%s) -> %s from %s", desc, got.SubscriptionID, start.Format(time.RFC3339Nano))
	return nil
}

// Fee is a plan version's fixed fee per period.
type Fee struct {
	Code   string
	Amount decimal.Decimal
}

// FeeLine is a fixed-fee (Code set) or minimum true-up line of a period.
type FeeLine struct {
	Kind     string // "fixed_fee" or "minimum_true_up"
	Plan     string
	Version  int64
	Code     string
	Days, Of int
	Amount   decimal.Decimal
	Currency string
}

func (l FeeLine) key() string { return fmt.Sprintf("%s/%s/%d/%s", l.Kind, l.Plan, l.Version, l.Code) }

// prorate is amount x days / of, rounded half-even to the minor unit, on
// exact rationals.
func prorate(amount decimal.Decimal, days, of int, currency string) decimal.Decimal {
	x := new(big.Rat).Mul(amount.Rat(), big.NewRat(int64(days), int64(of)))
	x.Mul(x, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(minor(currency))), nil)))
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int)) // x >= 0
	twice := new(big.Int).Mul(r, big.NewInt(2))
	if c := twice.Cmp(x.Denom()); c > 0 || (c == 0 && q.Bit(0) == 1) {
		q.Add(q, big.NewInt(1))
	}
	return decimal.NewFromBigInt(q, -minor(currency))
}

// fees are period p's fee lines by currency as the subscriptions and plans
// stand (DESIGN.md section 3a): each day of p in its zone belongs to the
// subscription and plan version in effect at the day's first instant; a
// version a subscription spent days on bills each fee x days / days of the
// period, and a true-up of what its minimum spend (prorated the same way)
// exceeds its fee lines and its plan lines of the period by.
func (t *Tenant) fees(p string) map[string][]FeeLine {
	m, err := time.Parse("2006-01", p)
	if err != nil {
		panic(err)
	}
	zone := t.setting(p).Zone
	type pv struct {
		plan string
		n    int64
	}
	spent, of := map[pv]int{}, 0
	for d := 1; ; d++ {
		day := time.Date(m.Year(), m.Month(), d, 0, 0, 0, 0, zone)
		if day.Month() != m.Month() {
			break
		}
		of++
		at := day
		if mutation == "proration-off-by-a-day" { // a deliberately wrong model: a day belongs to what holds at its end
			at = day.AddDate(0, 0, 1).Add(-time.Microsecond)
		}
		if s := t.subscriptionAt(at); s != nil {
			if v := t.plans[s.Plan].inEffect(at); v != nil {
				spent[pv{s.Plan, v.N}]++
			}
		}
	}
	out := map[string][]FeeLine{}
	keys := make([]pv, 0, len(spent))
	for k := range spent {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].plan < keys[j].plan || (keys[i].plan == keys[j].plan && keys[i].n < keys[j].n)
	})
	for _, k := range keys {
		plan := t.plans[k.plan]
		v, days := plan.version(k.n), spent[k]
		billed := decimal.Zero
		for _, f := range v.Fees {
			a := prorate(f.Amount, days, of, plan.Currency)
			billed = billed.Add(a)
			out[plan.Currency] = append(out[plan.Currency], FeeLine{Kind: "fixed_fee", Plan: k.plan, Version: k.n, Code: f.Code,
				Days: days, Of: of, Amount: a, Currency: plan.Currency})
		}
		if v.Min == nil {
			continue
		}
		charged := decimal.Zero
		for lk, l := range t.lines(p, plan.Currency, nil) {
			if lk.Plan == k.plan && lk.Version == k.n {
				charged = charged.Add(l.Amount)
			}
		}
		if short := prorate(*v.Min, days, of, plan.Currency).Sub(billed).Sub(charged); short.Sign() > 0 {
			out[plan.Currency] = append(out[plan.Currency], FeeLine{Kind: "minimum_true_up", Plan: k.plan, Version: k.n,
				Days: days, Of: of, Amount: short, Currency: plan.Currency})
		}
	}
	return out
}

// periodFees are a period's fee lines: frozen at its close, else as they
// stand.
func (t *Tenant) periodFees(p string) map[string][]FeeLine {
	if per := t.period(p); per.Closed {
		return per.Fees
	}
	return t.fees(p)
}

// subscribedIn reports whether a subscription holds at some instant of
// period p (billing's scheduler then closes it, charges or not).
func (t *Tenant) subscribedIn(p string) bool {
	for _, s := range t.Subs {
		if s.Start.Before(t.end(p)) && (s.End.IsZero() || s.End.After(t.start(p))) {
			return true
		}
	}
	return false
}

// maxPlanVersions is the money stack's METER_MAX_PLAN_VERSIONS_PER_MONTH
// and maxSubscriptions its BILLING_MAX_SUBSCRIPTIONS: a plan's version past
// the first taking effect in its UTC month, and a subscription that would
// give a tenant more than the second in effect from the start of its
// current period on, are refused 422 limit_exceeded. Small, so a run
// reaches both.
const (
	maxPlanVersions  = 2
	maxSubscriptions = 3
)

// planLimit is whether meter's METER_MAX_PLAN_VERSIONS_PER_MONTH refuses a
// version of p taking effect at eff (zero: now, within the schedule's
// lead), and either when the lead spans the end of a UTC month with one
// month at its limit and the other not (the version's month is known from
// the answer only).
func (r *runner) planLimit(p *Plan, eff time.Time) (full, either bool) {
	from, to := eff, eff
	if eff.IsZero() {
		from = instant(r.now())
		to = from.Add(r.cfg.Lead + time.Second)
	}
	a, b := p.versionsInMonth(from) >= maxPlanVersions, p.versionsInMonth(to) >= maxPlanVersions
	return a || b, a != b
}

// versionsInMonth is how many of p's published versions take effect in the
// UTC month of at.
func (p *Plan) versionsInMonth(at time.Time) int {
	y, m, _ := at.UTC().Date()
	n := 0
	for _, v := range p.Versions {
		if vy, vm, _ := v.Eff.UTC().Date(); (vy == y && vm == m) || mutation == "plan-versions-any-month" { // the mutation: a deliberately wrong model, every version counted
			n++
		}
	}
	return n
}

// subscriptionsFrom is how many of t's subscriptions are in effect at any
// time from the start of the period of now on: ended inside it, in effect,
// or scheduled (BILLING_MAX_SUBSCRIPTIONS counts them).
func (t *Tenant) subscriptionsFrom(now time.Time) int {
	from := t.start(t.periodOf(now))
	if mutation == "subscriptions-live-only" { // a deliberately wrong model: one ended in the period no longer counts
		from = now
	}
	n := 0
	for _, s := range t.Subs {
		if s.End.IsZero() || s.End.After(from) {
			n++
		}
	}
	return n
}
