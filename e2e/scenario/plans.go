package scenario

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
)

// The plan story's tenant and offer: a SaaS customer in New York on "pro",
// USD 49 a month with 1,000 API requests included, then 0.002 a request, at
// least USD 100 a month; VAT 20% on top; a prepaid welcome credit.
const (
	PlanTenant   = "northwind"
	PlanCode     = "pro"
	PlanMeter    = "api_requests"
	PlanFeeCode  = "platform"
	PlanCurrency = "USD"
	PlanZone     = "America/New_York"
	PlanTaxCode  = "VAT"
	// planSubscribeDay and planSubscribeHour are when, in the tenant's
	// zone, the story's clock stands when the tenant subscribes: an evening
	// whose date is already the next day in UTC, so counting the days in
	// UTC would count one fewer.
	planSubscribeDay, planSubscribeHour = 10, 21
	// planChangeDay is when, at the same hour, the tenant moves from
	// "starter" to "pro": mid-month, so each plan bills its own days.
	planChangeDay = 15
	// StarterCode is the plan the tenant starts on: USD 19 a month and
	// 0.004 a request, no minimum.
	StarterCode = "starter"
	// settingsLead is billing's: settings apply from the period after the
	// one in progress this far from now (decision 0014).
	settingsLead = 10 * time.Minute
)

// The plan's prices, the tenant's tax rate and its credit grant, in USD.
var (
	PlanFee       = decimal.RequireFromString("49")
	PlanMinimum   = decimal.RequireFromString("100")
	PlanIncluded  = decimal.NewFromInt(1000)
	PlanUnitPrice = decimal.RequireFromString("0.002")
	PlanTaxRate   = decimal.RequireFromString("0.2")
	PlanGrant     = decimal.RequireFromString("25.00")
	StarterFee    = decimal.RequireFromString("19")
	StarterPrice  = decimal.RequireFromString("0.004")
)

// planCents is USD's minor unit: every rounding of the story is half-even
// to it.
const planCents = 2

// PlanResult is what the plan story saw beside what it computed: the
// settings' first period, the subscription and its days, billing's
// estimate, and every figure of the issued invoice.
type PlanResult struct {
	Tenant, Plan, Currency, Zone string
	Period                       string // the period billed: the settings' first
	EffectiveFrom                string // as billing answered the settings
	WantEffectiveFrom            string
	PlanVersion                  int64
	StartsAt                     time.Time // the subscription's, as billing answered it
	Days, PeriodDays             int       // the demo's count of the subscription's days
	// The starter plan the tenant held before the change: its version,
	// start, days, and the facts it priced.
	StarterVersion               int64
	StarterStartsAt              time.Time
	StarterDays                  int
	StarterFacts                 int
	StarterQuantity              decimal.Decimal
	UTCDays                      int // the days a count in UTC would give, for contrast
	Facts                        int
	Quantity                     decimal.Decimal
	Estimate, WantEstimate       decimal.Decimal // billing's running estimate before the close
	Status                       string
	Number                       int64
	Lines                        []PlanLine      // the invoice's lines and figures, in its order
	Balance, WantBalance         decimal.Decimal // the grant's, after the draw
	GrantStatus, WantGrantStatus string
	ClockMoves                   []ClockMove
	SourceEventIDs               []string // of the facts sent
	ChargeLineID                 string   // the issued invoice's charge line
	Alert                        AlertResult
	Took                         time.Duration
	Mismatches                   []string
}

// ClockMove is one move of the services' clock, and why.
type ClockMove struct {
	To  time.Time
	Why string
}

// PlanLine is one invoice line, or one of the invoice's figures (Figure:
// subtotal, taxTotal, total, creditsApplied, amountDue), of the plan story:
// what the invoice says beside what the story computed, and how.
type PlanLine struct {
	Kind, How          string
	Plan               string // the plan of a charge, fee or true-up line
	Figure             bool
	Found, WantFound   bool
	Amount, WantAmount decimal.Decimal
}

// OK reports whether the line agrees with the story's arithmetic.
func (l PlanLine) OK() bool {
	return l.Found == l.WantFound && (!l.Found || l.Amount.Equal(l.WantAmount))
}

// PlanStory bills one new tenant the way a SaaS company sells, moving every
// service's clock through clk (decision 0015): a catalog-admin defines a
// meter and publishes the plan; the tenant sets its zone and a tax rate
// (from the next period), the clock moves into that period, the tenant
// subscribes (never backdated), gets a credit grant and sends usage;
// billing's estimate is read; the clock moves past the period's end, the
// period is closed, and every line of the issued invoice is checked
// against the story's own arithmetic. It moves the services' clock forward
// by a month or two: run it after every story that needs the present.
func PlanStory(ctx context.Context, ep Endpoints, cfg Config, clk Clock) (*PlanResult, error) {
	cfg.defaults()
	began := time.Now()
	r := &run{cfg: cfg, ep: ep, res: &Result{}}
	res := &PlanResult{Tenant: PlanTenant, Plan: PlanCode, Currency: PlanCurrency, Zone: PlanZone}
	err := r.planStory(ctx, res, clk)
	res.Mismatches, res.Took = r.res.Mismatches, time.Since(began)
	return res, err
}

func (r *run) planStory(ctx context.Context, res *PlanResult, clk Clock) error {
	loc, err := time.LoadLocation(PlanZone)
	if err != nil {
		return err
	}
	if err := r.publishPlan(ctx, res); err != nil {
		return err
	}
	if err := r.planSettings(ctx, res, clk); err != nil {
		return err
	}
	r.res.Period = res.Period
	start, err := time.ParseInLocation("2006-01", res.Period, loc)
	if err != nil {
		return err
	}
	to := time.Date(start.Year(), start.Month(), planSubscribeDay, planSubscribeHour, 0, 0, 0, loc)
	if err := r.moveClock(res, clk, to, "into the settings' first period, an evening"); err != nil {
		return err
	}
	if res.StarterStartsAt, err = r.subscribe(ctx, res, clk, StarterCode); err != nil {
		return err
	}
	grantID, err := r.grantCredit(ctx, res)
	if err != nil {
		return err
	}
	alerts, err := r.planAlert(ctx, res)
	if err != nil {
		return err
	}
	defer alerts.close()
	r.cfg.Progress("plan story: %s subscribed to %s from %s (%s); got a USD %s credit grant", res.Tenant, StarterCode,
		res.StarterStartsAt.UTC().Format(time.RFC3339Nano), res.StarterStartsAt.In(loc).Format("2006-01-02 15:04 MST"),
		PlanGrant.StringFixed(planCents))
	starter := []decimal.Decimal{decimal.NewFromInt(100), decimal.NewFromInt(200), decimal.NewFromInt(300)}
	if err := r.sendPlanFacts(ctx, res, clk, StarterCode, res.StarterStartsAt, starter); err != nil {
		return err
	}
	change := time.Date(start.Year(), start.Month(), planChangeDay, planSubscribeHour, 0, 0, 0, loc)
	if err := r.moveClock(res, clk, change, "mid-month, to change plans"); err != nil {
		return err
	}
	if res.StartsAt, err = r.subscribe(ctx, res, clk, PlanCode); err != nil {
		return err
	}
	res.StarterDays, res.PeriodDays = heldDays(start, res.StarterStartsAt, res.StartsAt)
	res.Days, _ = heldDays(start, res.StartsAt, time.Time{})
	res.UTCDays, _ = heldDays(time.Date(start.Year(), start.Month(), 1, 0, 0, 0, 0, time.UTC), res.StartsAt, time.Time{})
	r.cfg.Progress("plan story: %s changed to %s from %s (%s): %s holds %d of %d days, %s %d", res.Tenant, PlanCode,
		res.StartsAt.UTC().Format(time.RFC3339Nano), res.StartsAt.In(loc).Format("2006-01-02 15:04 MST"), StarterCode,
		res.StarterDays, res.PeriodDays, PlanCode, res.Days)
	var pro []decimal.Decimal
	for i := range 10 {
		pro = append(pro, decimal.NewFromInt(900).Add(decimal.RequireFromString("75.5").Mul(decimal.NewFromInt(int64(i)))))
	}
	if err := r.sendPlanFacts(ctx, res, clk, PlanCode, res.StartsAt, pro); err != nil {
		return err
	}
	if err := r.checkAlert(ctx, res, alerts, false); err != nil {
		return err
	}
	want := planInvoice(res, grantID)
	if err := r.planEstimate(ctx, res, want); err != nil {
		return err
	}
	if err := r.moveClock(res, clk, start.AddDate(0, 1, 0).Add(time.Minute), "past the period's end, into its grace"); err != nil {
		return err
	}
	resp, err := r.call(ctx, http.MethodPost, r.ep.Billing+"/v1/tenants/"+res.Tenant+"/periods/"+res.Period+"/close", nil,
		map[string]string{"Idempotency-Key": "close-" + res.Tenant + "-" + res.Period}, nil)
	if err != nil {
		return err
	}
	if resp.status != http.StatusAccepted {
		return fmt.Errorf("close %s %s: status %d: %s", res.Tenant, res.Period, resp.status, resp.body)
	}
	if err := r.checkPlanInvoice(ctx, res, want); err != nil {
		return err
	}
	if err := r.checkAlert(ctx, res, alerts, true); err != nil {
		return err
	}
	if err := r.traceLine(ctx, res, res.ChargeLineID, res.SourceEventIDs); err != nil {
		return err
	}
	return r.checkGrant(ctx, res, grantID)
}

// moveClock moves every service's clock to `to`.
func (r *run) moveClock(res *PlanResult, clk Clock, to time.Time, why string) error {
	from := clk.Now()
	if err := clk.Advance(to); err != nil {
		return fmt.Errorf("move the clock: %w", err)
	}
	res.ClockMoves = append(res.ClockMoves, ClockMove{To: to, Why: why})
	r.cfg.Progress("plan story: moved every service's clock from %s to %s (%s, +%s)", from.UTC().Format(time.RFC3339),
		to.UTC().Format(time.RFC3339), to.Format("2006-01-02 15:04 MST"), inDays(to.Sub(from)))
	return nil
}

// inDays shows d in days and hours.
func inDays(d time.Duration) string {
	h := int(d.Round(time.Hour) / time.Hour)
	return fmt.Sprintf("%dd%02dh", h/24, h%24)
}

// publishPlan defines the plan's meter and publishes the plan, as a
// catalog-admin.
func (r *run) publishPlan(ctx context.Context, res *PlanResult) error {
	admin, err := auth.TokenFromEnv("scenario-catalog", auth.RoleCatalogAdmin, "")
	if err != nil {
		return err
	}
	headers := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + admin, "Idempotency-Key": key}
	}
	resp, err := r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/meters",
		map[string]any{"code": PlanMeter, "name": "API requests", "aggregation": "sum", "eventType": "api.request"}, headers("meter-"+PlanMeter), nil)
	if err != nil {
		return err
	}
	if resp.status != http.StatusCreated {
		return fmt.Errorf("define meter %s: status %d: %s", PlanMeter, resp.status, resp.body)
	}
	body := map[string]any{
		"code": PlanCode, "name": "Pro", "currency": PlanCurrency,
		"fixedFees": []map[string]string{{"code": PlanFeeCode, "name": "Platform fee", "amount": PlanFee.String()}},
		"charges": []map[string]any{{"meterCode": PlanMeter, "model": "graduated", "tiers": []map[string]string{
			{"upTo": PlanIncluded.String(), "unitPrice": "0"}, {"unitPrice": PlanUnitPrice.String()}}}},
		"minimumSpend": PlanMinimum.String(),
	}
	var plan struct {
		Version     int64     `json:"version"`
		EffectiveAt time.Time `json:"effectiveAt"`
	}
	resp, err = r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/plans", body, headers("plan-"+PlanCode), &plan)
	if err != nil {
		return err
	}
	if resp.status != http.StatusCreated || plan.Version != 1 {
		return fmt.Errorf("publish plan %s: status %d: %s", PlanCode, resp.status, resp.body)
	}
	res.PlanVersion = plan.Version
	r.cfg.Progress("plan story: published plan %s v%d (USD %s a month, %s %s included then %s, at least %s), effective %s",
		PlanCode, plan.Version, PlanFee, PlanIncluded, PlanMeter, PlanUnitPrice, PlanMinimum, plan.EffectiveAt.UTC().Format(time.RFC3339Nano))
	body = map[string]any{
		"code": StarterCode, "name": "Starter", "currency": PlanCurrency,
		"fixedFees": []map[string]string{{"code": PlanFeeCode, "name": "Platform fee", "amount": StarterFee.String()}},
		"charges":   []map[string]any{{"meterCode": PlanMeter, "model": "unit", "unitPrice": StarterPrice.String()}},
	}
	resp, err = r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/plans", body, headers("plan-"+StarterCode), &plan)
	if err != nil {
		return err
	}
	if resp.status != http.StatusCreated || plan.Version != 1 {
		return fmt.Errorf("publish plan %s: status %d: %s", StarterCode, resp.status, resp.body)
	}
	res.StarterVersion = plan.Version
	r.cfg.Progress("plan story: published plan %s v%d (USD %s a month, %s a request)", StarterCode, plan.Version, StarterFee, StarterPrice)
	return nil
}

// planSettings puts the tenant's zone and tax rate; they apply from the
// period after the one in progress settingsLead from now (in the zone the
// tenant had: UTC), which the story then bills.
func (r *run) planSettings(ctx context.Context, res *PlanResult, clk Clock) error {
	res.WantEffectiveFrom = nextPeriod(events.Period(clk.Now().Add(settingsLead)))
	body := map[string]any{"timeZone": PlanZone, "taxRates": []map[string]string{
		{"code": PlanTaxCode, "name": "VAT 20%", "rate": PlanTaxRate.String()}}}
	var got struct {
		EffectiveFrom string `json:"effectiveFrom"`
	}
	resp, err := r.call(ctx, http.MethodPut, r.ep.Billing+"/v1/tenants/"+res.Tenant+"/settings", body,
		map[string]string{"Idempotency-Key": "settings-" + res.Tenant}, &got)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return fmt.Errorf("settings of %s: status %d: %s", res.Tenant, resp.status, resp.body)
	}
	res.EffectiveFrom, res.Period = got.EffectiveFrom, got.EffectiveFrom
	if got.EffectiveFrom != res.WantEffectiveFrom {
		r.mismatch("%s's settings apply from %s, want %s (the period after the one in progress %s from now)",
			res.Tenant, got.EffectiveFrom, res.WantEffectiveFrom, settingsLead)
		res.Period = res.WantEffectiveFrom
	}
	r.cfg.Progress("plan story: %s set its zone %s and VAT 20%%, effective from %s", res.Tenant, PlanZone, res.EffectiveFrom)
	return nil
}

func nextPeriod(p string) string {
	t, _ := time.Parse("2006-01", p)
	return t.AddDate(0, 1, 0).Format("2006-01")
}

// subscribe subscribes the tenant to plan as soon as it may (no startsAt:
// never backdated), once billing has learnt the plan, ending the plan it
// held, and returns when the subscription starts.
func (r *run) subscribe(ctx context.Context, res *PlanResult, clk Clock, plan string) (time.Time, error) {
	var sub struct {
		PlanCode string    `json:"planCode"`
		StartsAt time.Time `json:"startsAt"`
		Code     string    `json:"code"`
	}
	attempt := 0
	asked := clk.Now()
	err := r.waitFor(ctx, "billing to learn plan "+plan, func() (bool, string, error) {
		attempt++
		resp, err := r.call(ctx, http.MethodPost, r.ep.Billing+"/v1/tenants/"+res.Tenant+"/subscriptions",
			map[string]string{"planCode": plan}, map[string]string{"Idempotency-Key": fmt.Sprintf("subscribe-%s-%s-%d", res.Tenant, plan, attempt)}, &sub)
		if err != nil {
			return false, "", err
		}
		switch {
		case resp.status == http.StatusCreated:
			return true, "", nil
		case sub.Code == "unknown_plan":
			return false, "billing answers unknown_plan", nil
		}
		return false, "", fmt.Errorf("subscribe %s to %s: status %d: %s", res.Tenant, plan, resp.status, resp.body)
	})
	if err != nil {
		return time.Time{}, err
	}
	if sub.PlanCode != plan || sub.StartsAt.Before(asked) || sub.StartsAt.After(clk.Now().Add(10*time.Second)) {
		r.mismatch("%s's subscription: plan %s from %s, want %s from about now (%s)", res.Tenant, sub.PlanCode,
			sub.StartsAt.Format(time.RFC3339Nano), plan, asked.Format(time.RFC3339Nano))
	}
	return sub.StartsAt, nil
}

// heldDays counts the days of the period starting at start (a month in
// the tenant's zone) that a subscription from startsAt until endsAt (zero:
// none) holds at the first instant of (DESIGN.md 3a: a day belongs to what
// was in effect at its start), and the days of the period.
func heldDays(start, startsAt, endsAt time.Time) (days, periodDays int) {
	for d := start; d.Month() == start.Month(); d = time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, d.Location()) {
		periodDays++
		if !startsAt.After(d) && (endsAt.IsZero() || d.Before(endsAt)) {
			days++
		}
	}
	return days, periodDays
}

// grantCredit gives the tenant a prepaid credit grant (invoice) and
// returns its id.
func (r *run) grantCredit(ctx context.Context, res *PlanResult) (string, error) {
	var g struct {
		GrantID string          `json:"grantId"`
		Balance decimal.Decimal `json:"balance"`
	}
	resp, err := r.call(ctx, http.MethodPost, r.ep.Invoice+"/v1/tenants/"+res.Tenant+"/credit-grants",
		map[string]string{"currency": PlanCurrency, "amount": PlanGrant.StringFixed(planCents), "reason": "welcome credit"},
		map[string]string{"Idempotency-Key": "grant-" + res.Tenant}, &g)
	if err != nil {
		return "", err
	}
	if resp.status != http.StatusCreated || g.GrantID == "" {
		return "", fmt.Errorf("credit grant of %s: status %d: %s", res.Tenant, resp.status, resp.body)
	}
	if !g.Balance.Equal(PlanGrant) {
		r.mismatch("%s's new credit grant: balance %s, want %s", res.Tenant, g.Balance, PlanGrant)
	}
	return g.GrantID, nil
}

// sendPlanFacts sends facts of the plan's meter of these quantities once
// the subscription to plan (from startsAt) is in effect, naming the plan's
// currency (usage does not know subscriptions: decision 0021's known
// gaps), and waits for their charges, each priced by that plan.
func (r *run) sendPlanFacts(ctx context.Context, res *PlanResult, clk Clock, plan string, startsAt time.Time, qs []decimal.Decimal) error {
	if wait := startsAt.Sub(clk.Now()); wait > 0 {
		select {
		case <-time.After(wait + 10*time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	now := clk.Now().UTC().Truncate(time.Millisecond)
	var batch []map[string]any
	for i, q := range qs {
		id := fmt.Sprintf("req-%s-%02d", plan, i)
		if plan == PlanCode {
			res.Quantity = res.Quantity.Add(q)
			res.SourceEventIDs = append(res.SourceEventIDs, id)
		} else {
			res.StarterQuantity = res.StarterQuantity.Add(q)
		}
		batch = append(batch, map[string]any{"sourceSystem": "scenario", "sourceEventId": id, "meterCode": PlanMeter,
			"quantity": q.String(), "currency": PlanCurrency, "occurredAt": now.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)})
	}
	if plan == PlanCode {
		res.Facts = len(batch)
	} else {
		res.StarterFacts = len(batch)
	}
	err := r.waitFor(ctx, "usage to accept "+res.Tenant+"'s requests", func() (bool, string, error) {
		var out struct {
			Results []struct {
				Status int    `json:"status"`
				Code   string `json:"code"`
			} `json:"results"`
		}
		resp, err := r.call(ctx, http.MethodPost, r.ep.Usage+"/v1/tenants/"+res.Tenant+"/usage:batch", map[string]any{"events": batch}, nil, &out)
		if err != nil {
			return false, "", err
		}
		if resp.status != http.StatusOK || len(out.Results) != len(batch) {
			return false, "", fmt.Errorf("usage batch of %s: status %d: %s", res.Tenant, resp.status, resp.body)
		}
		for _, x := range out.Results {
			switch {
			case x.Code == "unknown_meter":
				return false, "usage answers unknown_meter (it has not learned the meter yet)", nil
			case x.Status != http.StatusCreated && x.Status != http.StatusOK:
				return false, "", fmt.Errorf("usage batch of %s: a fact answered %d %s: %s", res.Tenant, x.Status, x.Code, resp.body)
			}
		}
		return true, "", nil
	})
	if err != nil {
		return err
	}
	version := map[string]int64{PlanCode: res.PlanVersion, StarterCode: res.StarterVersion}
	return r.waitFor(ctx, "the charges of "+res.Tenant+" on "+plan, func() (bool, string, error) {
		cs, err := r.charges(ctx, res.Tenant)
		if err != nil || len(cs) < res.StarterFacts+res.Facts {
			return false, fmt.Sprintf("%d/%d charges", len(cs), res.StarterFacts+res.Facts), err
		}
		on := 0
		for _, c := range cs {
			p := deref(c.PlanCode)
			if p == plan {
				on++
			}
			if (p != PlanCode && p != StarterCode) || c.PriceVersion != version[p] || c.Currency != PlanCurrency || c.Period != res.Period {
				r.mismatch("%s charge %s: plan %q v%d %s in %s, want plan %s or %s v1 USD in %s", res.Tenant, c.ChargeId, p,
					c.PriceVersion, c.Currency, c.Period, StarterCode, PlanCode, res.Period)
			}
		}
		if on != len(qs) {
			r.mismatch("%s: %d charges priced by %s, want %d", res.Tenant, on, plan, len(qs))
		}
		return true, "", nil
	})
}

// planInvoice is the invoice the story expects, from its own arithmetic
// (DESIGN.md 3a): the plan's charge line (graduated: the first 1,000
// requests at 0, the rest at 0.002), the fixed fee and the minimum spend
// prorated by the subscription's days (x days / days, half-even), a
// true-up when the plan's lines come to less than that minimum, the
// rounding of the subtotal, the tax on the rounded subtotal, and the
// credit drawn: min(grant, total).
func planInvoice(res *PlanResult, grantID string) []PlanLine {
	starterCharge := res.StarterQuantity.Mul(StarterPrice)
	starterFee := prorate(StarterFee, res.StarterDays, res.PeriodDays)
	charge := decimal.Max(decimal.Zero, res.Quantity.Sub(PlanIncluded)).Mul(PlanUnitPrice)
	fee := prorate(PlanFee, res.Days, res.PeriodDays)
	minimum := prorate(PlanMinimum, res.Days, res.PeriodDays)
	trueUp := minimum.Sub(fee).Sub(charge) // pro's minimum against pro's own lines
	subtotal := starterCharge.Add(starterFee).Add(charge).Add(fee)
	if trueUp.Sign() > 0 {
		subtotal = subtotal.Add(trueUp)
	}
	rounded := subtotal.RoundBank(planCents)
	tax := PlanTaxRate.Mul(rounded).RoundBank(planCents)
	total := rounded.Add(tax)
	credit := decimal.Min(PlanGrant, total)
	days := fmt.Sprintf("%d/%d days", res.Days, res.PeriodDays)
	starterDays := fmt.Sprintf("%d/%d days", res.StarterDays, res.PeriodDays)
	return []PlanLine{
		{Kind: "charge", Plan: StarterCode, How: fmt.Sprintf("%s %s (%d facts) x %s", PlanMeter, res.StarterQuantity, res.StarterFacts, StarterPrice),
			WantFound: true, WantAmount: starterCharge},
		{Kind: "charge", Plan: PlanCode, How: fmt.Sprintf("%s %s (%d facts): (%s - %s included) x %s", PlanMeter, res.Quantity, res.Facts, res.Quantity, PlanIncluded, PlanUnitPrice),
			WantFound: true, WantAmount: charge},
		{Kind: "fixed_fee", Plan: StarterCode, How: fmt.Sprintf("%s: %s x %s, half-even", PlanFeeCode, StarterFee, starterDays), WantFound: true, WantAmount: starterFee},
		{Kind: "fixed_fee", Plan: PlanCode, How: fmt.Sprintf("%s: %s x %s, half-even", PlanFeeCode, PlanFee, days), WantFound: true, WantAmount: fee},
		{Kind: "minimum_true_up", Plan: PlanCode, How: fmt.Sprintf("minimum %s x %s = %s, less %s's fee and charge", PlanMinimum, days, minimum, PlanCode),
			WantFound: trueUp.Sign() > 0, WantAmount: decimal.Max(trueUp, decimal.Zero)},
		{Kind: "subtotal", Figure: true, How: "the lines above, exact", WantFound: true, WantAmount: subtotal},
		{Kind: "rounding", How: fmt.Sprintf("subtotal %s to the cent, half-even", subtotal), WantFound: !rounded.Equal(subtotal), WantAmount: rounded.Sub(subtotal)},
		{Kind: "tax", How: fmt.Sprintf("%s %s x %s, half-even", PlanTaxCode, PlanTaxRate, rounded), WantFound: true, WantAmount: tax},
		{Kind: "taxTotal", Figure: true, How: "the tax lines", WantFound: true, WantAmount: tax},
		{Kind: "total", Figure: true, How: fmt.Sprintf("%s + %s", rounded, tax), WantFound: true, WantAmount: total},
		{Kind: "credit_applied", How: fmt.Sprintf("grant …%s: -min(%s, %s)", tail(grantID), PlanGrant.StringFixed(planCents), total), WantFound: true, WantAmount: credit.Neg()},
		{Kind: "creditsApplied", Figure: true, How: "the credit lines", WantFound: true, WantAmount: credit.Neg()},
		{Kind: "amountDue", Figure: true, How: fmt.Sprintf("%s - %s", total, credit), WantFound: true, WantAmount: total.Sub(credit)},
	}
}

func tail(id string) string {
	if len(id) > 12 {
		return id[len(id)-12:]
	}
	return id
}

// prorate is amount x days / periodDays rounded half-even to the cent,
// in exact rationals.
func prorate(amount decimal.Decimal, days, periodDays int) decimal.Decimal {
	x := new(big.Rat).Mul(amount.Rat(), big.NewRat(int64(days)*100, int64(periodDays))) // in cents, >= 0
	q, rem := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if c := new(big.Int).Lsh(rem, 1).Cmp(x.Denom()); c > 0 || (c == 0 && q.Bit(0) == 1) {
		q.Add(q, big.NewInt(1))
	}
	return decimal.NewFromBigInt(q, -planCents)
}

func wantOf(want []PlanLine, kind string) decimal.Decimal {
	for _, l := range want {
		if l.Kind == kind {
			return l.WantAmount
		}
	}
	return decimal.Zero
}

// planEstimate reads billing's running estimate of the open period: the
// exact subtotal, the fee and true-up lines included as they stand.
func (r *run) planEstimate(ctx context.Context, res *PlanResult, want []PlanLine) error {
	res.WantEstimate = wantOf(want, "subtotal")
	var est struct {
		Status   string                     `json:"status"`
		Estimate map[string]decimal.Decimal `json:"estimate"`
	}
	resp, err := r.call(ctx, http.MethodGet, r.ep.Billing+"/v1/tenants/"+res.Tenant+"/periods/"+res.Period, nil, nil, &est)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return fmt.Errorf("period %s of %s: status %d: %s", res.Period, res.Tenant, resp.status, resp.body)
	}
	res.Estimate = est.Estimate[PlanCurrency]
	if est.Status != "open" || !res.Estimate.Equal(res.WantEstimate) {
		r.mismatch("%s's period %s: %s, estimate %s, want open, %s", res.Tenant, res.Period, est.Status, res.Estimate, res.WantEstimate)
	}
	return nil
}

type planLineDoc struct {
	LineID       string           `json:"lineId"`
	Kind         string           `json:"kind"`
	MeterCode    string           `json:"meterCode"`
	PriceVersion int64            `json:"priceVersion"`
	Quantity     decimal.Decimal  `json:"quantity"`
	ChargeCount  int64            `json:"chargeCount"`
	Amount       decimal.Decimal  `json:"amount"`
	PlanCode     string           `json:"planCode"`
	PlanVersion  int64            `json:"planVersion"`
	FeeCode      string           `json:"feeCode"`
	Days         int              `json:"days"`
	PeriodDays   int              `json:"periodDays"`
	TaxCode      string           `json:"taxCode"`
	TaxRate      *decimal.Decimal `json:"taxRate"`
	GrantID      string           `json:"grantId"`
}

type planInvoiceDoc struct {
	Status         string           `json:"status"`
	Currency       string           `json:"currency"`
	Number         *int64           `json:"number"`
	Lines          []planLineDoc    `json:"lines"`
	Subtotal       decimal.Decimal  `json:"subtotal"`
	TaxTotal       *decimal.Decimal `json:"taxTotal"`
	Total          *decimal.Decimal `json:"total"`
	CreditsApplied *decimal.Decimal `json:"creditsApplied"`
	AmountDue      *decimal.Decimal `json:"amountDue"`
}

// checkPlanInvoice waits for the period's invoice and checks each line and
// figure against want, and what each line names (plan, version, fee, days,
// tax code and rate, grant).
func (r *run) checkPlanInvoice(ctx context.Context, res *PlanResult, want []PlanLine) error {
	var inv planInvoiceDoc
	err := r.waitFor(ctx, "the invoice of "+res.Tenant, func() (bool, string, error) {
		invs, err := listAll[planInvoiceDoc](ctx, r, r.ep.Invoice+"/v1/tenants/"+res.Tenant+"/invoices?period="+res.Period, "invoices", "invoices of "+res.Tenant)
		if err != nil || len(invs) == 0 {
			return false, "no invoice yet", err
		}
		if len(invs) != 1 || invs[0].Currency != PlanCurrency {
			return false, "", fmt.Errorf("%s's invoices of %s: %d, want one in %s", res.Tenant, res.Period, len(invs), PlanCurrency)
		}
		inv = invs[0]
		return inv.Status == "issued", "invoice " + inv.Status, nil
	})
	if err != nil {
		return err
	}
	res.Status, res.Number = inv.Status, deref(inv.Number)
	if res.Number != 1 {
		r.mismatch("%s's first invoice: number %d, want 1", res.Tenant, res.Number)
	}
	got := map[string]planLineDoc{}
	// What each plan's lines must name: its version, days, facts.
	type planWant struct {
		version  int64
		days     int
		quantity decimal.Decimal
		facts    int
	}
	plans := map[string]planWant{
		PlanCode:    {res.PlanVersion, res.Days, res.Quantity, res.Facts},
		StarterCode: {res.StarterVersion, res.StarterDays, res.StarterQuantity, res.StarterFacts},
	}
	for _, l := range inv.Lines {
		key := l.Kind + "/" + l.PlanCode
		if _, dup := got[key]; dup {
			r.mismatch("%s's invoice: two %s lines", res.Tenant, key)
		}
		got[key] = l
		pw, known := plans[l.PlanCode]
		var bad bool
		switch l.Kind {
		case "charge":
			if l.PlanCode == PlanCode {
				res.ChargeLineID = l.LineID
			}
			bad = !known || l.MeterCode != PlanMeter || l.PriceVersion != pw.version || l.PlanVersion != pw.version ||
				!l.Quantity.Equal(pw.quantity) || l.ChargeCount != int64(pw.facts)
		case "fixed_fee":
			bad = !known || l.PlanVersion != pw.version || l.FeeCode != PlanFeeCode || l.Days != pw.days || l.PeriodDays != res.PeriodDays
		case "minimum_true_up":
			bad = l.PlanCode != PlanCode || l.PlanVersion != res.PlanVersion || l.Days != res.Days || l.PeriodDays != res.PeriodDays
		case "tax":
			bad = l.TaxCode != PlanTaxCode || l.TaxRate == nil || !l.TaxRate.Equal(PlanTaxRate)
		case "credit_applied", "rounding":
		default:
			bad = true
		}
		if bad {
			r.mismatch("%s's invoice line %+v: want %s, plan %s v%d (%d/%d days, %s requests in %d charges) or %s v%d (%d days, %s in %d), fee %s, tax %s %s",
				res.Tenant, l, PlanMeter, PlanCode, res.PlanVersion, res.Days, res.PeriodDays, res.Quantity, res.Facts,
				StarterCode, res.StarterVersion, res.StarterDays, res.StarterQuantity, res.StarterFacts, PlanFeeCode, PlanTaxCode, PlanTaxRate)
		}
	}
	figures := map[string]*decimal.Decimal{"subtotal": &inv.Subtotal, "taxTotal": inv.TaxTotal, "total": inv.Total,
		"creditsApplied": inv.CreditsApplied, "amountDue": inv.AmountDue}
	for _, l := range want {
		if l.Figure {
			f := figures[l.Kind]
			if l.Found = f != nil; l.Found {
				l.Amount = *f
			}
		} else {
			g, ok := got[l.Kind+"/"+l.Plan]
			l.Found, l.Amount = ok, g.Amount
		}
		res.Lines = append(res.Lines, l)
		if !l.OK() {
			r.mismatch("%s's invoice %s: %s (present %v), want %s (present %v): %s", res.Tenant, l.Kind, l.Amount, l.Found, l.WantAmount, l.WantFound, l.How)
		}
	}
	return nil
}

// checkGrant reads the grant's balance after the draw.
func (r *run) checkGrant(ctx context.Context, res *PlanResult, grantID string) error {
	type grant struct {
		GrantID string          `json:"grantId"`
		Balance decimal.Decimal `json:"balance"`
		Status  string          `json:"status"`
	}
	grants, err := listAll[grant](ctx, r, r.ep.Invoice+"/v1/tenants/"+res.Tenant+"/credit-grants?limit=100", "grants", "credit grants of "+res.Tenant)
	if err != nil {
		return err
	}
	res.WantBalance = PlanGrant.Sub(decimal.Min(PlanGrant, wantOf(res.Lines, "total")))
	res.WantGrantStatus = "active"
	if res.WantBalance.IsZero() {
		res.WantGrantStatus = "used"
	}
	for _, g := range grants {
		if g.GrantID == grantID {
			res.Balance, res.GrantStatus = g.Balance, g.Status
		}
	}
	if !res.Balance.Equal(res.WantBalance) || res.GrantStatus != res.WantGrantStatus {
		r.mismatch("%s's credit grant after the invoice: balance %s %s, want %s %s", res.Tenant, res.Balance, res.GrantStatus, res.WantBalance, res.WantGrantStatus)
	}
	return nil
}
