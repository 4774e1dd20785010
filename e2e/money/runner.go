package money

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// meters the tenants may price, one currency each; "ghost" is never priced.
var meters = []meterDefinition{
	{Code: "api_calls", Currency: "USD", Agg: "sum", Catalog: true}, {Code: "messages", Currency: "USD", Agg: "sum", Catalog: true},
	{Code: "storage_gb", Currency: "KRW", Agg: "sum", Catalog: true}, {Code: "compute_s", Currency: "BHD", Agg: "sum", Catalog: true},
	{Code: "tokens", Currency: "JPY", Agg: "sum", Catalog: true},
	{Code: "ai_tokens", Currency: "USD", Agg: "sum", Dims: []string{"model", "region"}, Catalog: true},
	{Code: "ai_requests", Currency: "EUR", Agg: "count", Dims: []string{"model"}, Catalog: true},
	{Code: "peak_seats", Currency: "USD", Agg: "max", Catalog: true},
	{Code: "storage_eod", Currency: "KRW", Agg: "latest", Catalog: true},
	{Code: "active_users", Currency: "USD", Agg: "unique_count", ValueProp: "user", Dims: []string{"region"}, Catalog: true},
}

// meterDefinition is a meter of the test, each defined in the catalog at the
// start of a run (DESIGN.md section 3a), so that whether a tenant's fact of
// a meter it has no price for is unknown_meter or no_price_in_effect never
// depends on what an earlier run on the same stack priced. (Meters implied
// by a price are the demo's, the load tool's and the e2e tests'.)
type meterDefinition struct {
	Code, Currency string
	Agg            string // "" is sum
	ValueProp      string
	Dims           []string
	Catalog        bool
}

func meterDef(code string) meterDefinition {
	for _, m := range meters {
		if m.Code == code {
			return m
		}
	}
	return meterDefinition{Code: code}
}

// propertyValues are the values facts take for each property.
var propertyValues = map[string][]string{
	"model": {"gpt-4", "gpt-3.5", "claude"}, "region": {"eu", "us"},
	"user": {"u1", "u2", "u3", "u4", "u5", "u6"},
}

const ghostMeter = "ghost"

// Config of a run.
type Config struct {
	URLs   map[string]string // service -> base URL
	Prefix string            // tenant ids start with it (unique per run)
	Lead   time.Duration     // meter's METER_SCHEDULE_LEAD
	Settle time.Duration     // how long to wait for the system to reach the model's state
	Mutate string            // a deliberate error in the model (to see the test fail)
	Clock  Clock
	Logf   func(format string, args ...any)
	// Hooks is the tenants' webhook endpoint (nil: no alerts).
	Hooks *Hooks
}

// Failure is a disagreement between the services and the model.
type Failure struct {
	Op    int    // index of the op that found it
	Kind  string // a short category, compared while shrinking
	Msg   string
	Steps []string // the ops as resolved, up to the failure
}

func (f *Failure) Error() string { return fmt.Sprintf("op %d: %s", f.Op, f.Msg) }

// Stats of a run.
type Stats struct {
	Ops, Facts, Accepted, Refused, Replays, Conflicts, Prices, Adjustments, Credits, CreditsRefused,
	AdjustmentsAtLimit, Corrections, Closes, Invoices, Checks, Settles int
	Settings, Advances, AutoCloses, Drafts, Late int
	// The catalog: accepted facts by their meter's aggregation, those rated
	// unpriced and those priced by a dimension price; dimension prices
	// activated and refused as ambiguous.
	ByAggregation                             map[string]int
	Unpriced, DimPriced, DimPrices, Ambiguous int
	// PricesAtEntries and PricesAtMonth count the activations refused at
	// meter's price limits: a tenant's entries, its versions of a month.
	PricesAtEntries, PricesAtMonth int
	// NoSeries counts the accepted facts of a meter the tenant had no
	// price of its own for (unpriced, decision 0019, unless a plan prices it).
	NoSeries int
	// Plans: versions published (or refused), subscriptions asked for, and
	// accepted facts priced by a plan's charge (decision 0021).
	PlanVersions, Subscriptions, PlanPriced int
	// PlansAtMonth and SubscriptionsAtLimit count the plan versions and
	// subscriptions refused at their limits (planLimit, subscriptionLimit).
	PlansAtMonth, SubscriptionsAtLimit int
	// FeeLines counts the fixed-fee and true-up lines of issued invoices compared.
	FeeLines int
	// TaxedInvoices counts the issued invoices with tax lines that agreed
	// with the model, by currency; TaxLines their tax lines.
	TaxedInvoices map[string]int
	TaxLines      int
	// Credit grants: accepted, refused, replayed, lists compared, and
	// accepted effective now whose answer had a finer effectiveAt than the
	// microsecond invoice stores; issued invoices with credit lines that
	// agreed with the model, their credit lines, and those of them whose
	// credits covered the whole total.
	Grants, GrantsRefused, GrantReplays, GrantLists, GrantsFinerThanMicros int
	CreditedInvoices, CreditLines, FullyCredited                           int
	// Periods close in order: closes refused while an earlier period had
	// charges, and facts rated late because a later period was closed
	// while their own was open.
	OutOfOrderCloses, LateBehindClosed, BehindClosedPicked, LaterCloses int
	// Alerts: created (by kind and aggregation or currency), refused at the
	// limit, refused as invalid, deleted; points where the model decided
	// them, and those where more than ten facts and adjustments touched a
	// figure that is not monotone (counted as may have reached); facts sent
	// to a usage alert's threshold; (alert, period) pairs told for certain
	// by the model; those received, of which told for certain, told where
	// the model said it may be, and told at exactly the threshold.
	Alerts, AlertsAtLimit, AlertsInvalid, AlertsDeleted, AlertPoints, AlertMayUnbounded, ToThreshold int
	AlertsByKind                                                                                     map[string]int
	AlertsPredicted, AlertsReceived, AlertsCertain, AlertsMayTold, AlertsExact                       int
}

func (s Stats) String() string {
	return fmt.Sprintf("%d ops: %d usage facts sent (%d accepted, %d late, %d refused, %d replays, %d conflicts), %d price activations, "+
		"%d adjustments posted (%d credits refused, %d refused at the period's limit), %d correction notes, %d explicit closes, %d settings changes, "+
		"%d clock moves, %d automatic closes, %d draft invoice comparisons, %d issued invoice comparisons, %d checks, %d settles",
		s.Ops, s.Facts, s.Accepted, s.Late, s.Refused, s.Replays, s.Conflicts, s.Prices, s.Adjustments, s.CreditsRefused,
		s.AdjustmentsAtLimit, s.Corrections, s.Closes, s.Settings, s.Advances, s.AutoCloses, s.Drafts, s.Invoices, s.Checks, s.Settles) +
		fmt.Sprintf("; catalog: accepted facts by aggregation %v, %d unpriced (%d of a meter the tenant has no price of its own for), %d priced by a dimension price; %d dimension prices activated, %d refused ambiguous_price, %d refused limit_exceeded (%d at the entries' limit, %d at a month's)",
			s.ByAggregation, s.Unpriced, s.NoSeries, s.DimPriced, s.DimPrices, s.Ambiguous, s.PricesAtEntries+s.PricesAtMonth, s.PricesAtEntries, s.PricesAtMonth) +
		fmt.Sprintf("; plans: %d versions published or refused (%d refused limit_exceeded), %d subscriptions asked (%d refused limit_exceeded), %d facts priced by a plan's charge, %d fee and true-up lines compared",
			s.PlanVersions, s.PlansAtMonth, s.Subscriptions, s.SubscriptionsAtLimit, s.PlanPriced, s.FeeLines) +
		fmt.Sprintf("; taxes: issued invoices with tax lines by currency %v, %d tax lines", s.TaxedInvoices, s.TaxLines) +
		fmt.Sprintf("; credits: %d grants (%d refused, %d replays, %d effective now answered finer than a microsecond), %d grant lists compared, "+
			"%d issued invoices with credit lines (%d lines, %d with nothing left due)",
			s.Grants, s.GrantsRefused, s.GrantReplays, s.GrantsFinerThanMicros, s.GrantLists, s.CreditedInvoices, s.CreditLines, s.FullyCredited) +
		fmt.Sprintf("; order: %d closes refused while an earlier period had charges, %d closes past empty open periods, "+
			"%d facts late behind a later closed period (%d times picked)",
			s.OutOfOrderCloses, s.LaterCloses, s.LateBehindClosed, s.BehindClosedPicked) +
		fmt.Sprintf("; alerts: %d created %v (%d refused limit_exceeded, %d refused invalid), %d deleted, %d facts to a threshold, "+
			"%d points (%d unbounded); %d (alert, period) told for certain by the model, %d received (%d certain, %d may, %d at exactly the threshold)",
			s.Alerts, s.AlertsByKind, s.AlertsAtLimit, s.AlertsInvalid, s.AlertsDeleted, s.ToThreshold, s.AlertPoints, s.AlertMayUnbounded,
			s.AlertsPredicted, s.AlertsReceived, s.AlertsCertain, s.AlertsMayTold, s.AlertsExact)
}

type runner struct {
	cfg     Config
	c       *client
	tenants []*Tenant
	active  []*Tenant
	steps   []string
	step    int
	rng     *rand.Rand
	stats   Stats
	counter int
	plans   map[string]*Plan // published by the run, by code
	// taxedSeen and creditedSeen are the issued invoices with tax lines,
	// and with credit lines, counted in stats (tenant, period, currency).
	taxedSeen, creditedSeen map[string]bool
	// alertsCounted and alertsPredicted are the alert keys counted in
	// stats as received, and as told for certain.
	alertsCounted, alertsPredicted map[string]bool
}

type mismatch struct{ kind, msg string }

func (m *mismatch) Error() string { return m.kind + ": " + m.msg }

func fail(kind, format string, args ...any) error {
	return &mismatch{kind, fmt.Sprintf(format, args...)}
}

// Run executes ops against the services and the model, then checks every
// tenant once more. It returns the stats and the first disagreement, or an
// error the system gave (5xx, transport) that is no disagreement.
func Run(ctx context.Context, cfg Config, ops []Op) (Stats, *Failure, error) {
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &runner{cfg: cfg, c: newClient(cfg.URLs), plans: map[string]*Plan{}, taxedSeen: map[string]bool{},
		creditedSeen: map[string]bool{}, alertsCounted: map[string]bool{}, alertsPredicted: map[string]bool{}}
	r.stats.AlertsByKind = map[string]int{}
	began := time.Now()
	handle := func(i int, err error) (*Failure, error) {
		var m *mismatch
		if errors.As(err, &m) {
			r.note("  !! %s", m.msg)
			return &Failure{Op: i, Kind: m.kind, Msg: m.msg, Steps: r.steps}, nil
		}
		return nil, fmt.Errorf("op %d (%s): %w", i, ops[i], err)
	}
	r.rng = rand.New(rand.NewPCG(1, 2))
	if err := r.defineCatalog(ctx); err != nil {
		f, err := handle(0, err)
		return r.stats, f, err
	}
	took := map[Kind]time.Duration{}
	defer func() {
		var parts []string
		for k := range kindNames {
			if d := took[Kind(k)]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %s", Kind(k), d.Round(time.Millisecond)))
			}
		}
		cfg.Logf("time by operation kind: %s", strings.Join(parts, ", "))
	}()
	for i, op := range ops {
		r.step = i
		r.rng = rand.New(rand.NewPCG(op.Seed, uint64(op.Kind)))
		opBegan := time.Now()
		err := r.exec(ctx, op)
		took[op.Kind] += time.Since(opBegan)
		if err != nil {
			f, err := handle(i, err)
			return r.stats, f, err
		}
		r.stats.Ops++
		if (i+1)%1000 == 0 {
			cfg.Logf("%d/%d ops, %s elapsed: %s", i+1, len(ops), time.Since(began).Round(time.Second), r.stats)
		}
	}
	r.step = len(ops)
	r.note("#%d final check of every tenant", len(ops))
	for _, t := range r.tenants {
		if err := r.check(ctx, t); err != nil {
			f, err := handle(len(ops), err)
			return r.stats, f, err
		}
	}
	return r.stats, nil, nil
}

func (r *runner) note(format string, args ...any) {
	r.steps = append(r.steps, fmt.Sprintf(format, args...))
}

func (r *runner) exec(ctx context.Context, op Op) error {
	if err := r.keepClear(ctx); err != nil {
		return err
	}
	switch op.Kind {
	case OpNewTenant:
		return r.newTenant(ctx)
	case OpAdvance:
		return r.advance(ctx)
	case OpPlan:
		return r.publishPlan(ctx)
	}
	t := r.pickTenant()
	if t == nil {
		r.note("#%d %s: skipped, no tenant", r.step, op.Kind)
		return nil
	}
	switch op.Kind {
	case OpActivate:
		return r.activate(ctx, t)
	case OpUsage, OpToBound, OpBatch, OpAdjust:
		var err error
		switch op.Kind {
		case OpUsage:
			err = r.usage(ctx, t, false)
		case OpToBound:
			err = r.usage(ctx, t, true)
		case OpBatch:
			err = r.batch(ctx, t)
		default:
			err = r.adjust(ctx, t)
		}
		if err != nil {
			return err
		}
		return r.afterOp(ctx, t, op.Kind)
	case OpReplay:
		return r.replayOrConflict(ctx, t, false)
	case OpConflict:
		return r.replayOrConflict(ctx, t, true)
	case OpAdjReplay:
		return r.adjReplay(ctx, t)
	case OpCheck:
		r.note("#%d check %s", r.step, t.ID)
		return r.check(ctx, t)
	case OpClose:
		return r.close(ctx)
	case OpSettings:
		return r.settings(ctx, t)
	case OpTaxes:
		return r.taxes(ctx, t)
	case OpGrant:
		return r.grant(ctx, t)
	case OpSubscribe:
		return r.subscribe(ctx, t)
	case OpAlert:
		return r.alertOp(ctx, t)
	case OpToThreshold:
		return r.toThreshold(ctx, t)
	}
	return fmt.Errorf("unknown op %v", op.Kind)
}

// pickTenant: mostly the newest active tenant, else the one before.
func (r *runner) pickTenant() *Tenant {
	n := len(r.active)
	if n == 0 {
		return nil
	}
	if n > 1 && r.rng.IntN(3) == 0 {
		return r.active[n-2]
	}
	return r.active[n-1]
}

func (r *runner) now() time.Time { return r.cfg.Clock.Now() }

func instant(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// ---- prices ----

func (r *runner) newTenant(ctx context.Context) error {
	r.counter++
	t := newTenant(fmt.Sprintf("%s-%d", r.cfg.Prefix, len(r.tenants)+1), r.now(), r.plans)
	r.tenants = append(r.tenants, t)
	r.active = append(r.active, t)
	if len(r.active) > 2 { // the oldest retires: a last check
		old := r.active[0]
		r.active = r.active[1:]
		r.note("#%d retire %s (check)", r.step, old.ID)
		if err := r.check(ctx, old); err != nil {
			return err
		}
	}
	r.note("#%d new tenant %s", r.step, t.ID)
	if r.cfg.Hooks != nil {
		if err := r.registerHook(ctx, t); err != nil {
			return err
		}
	}
	perm := r.rng.Perm(len(meters))
	k := 2 + r.rng.IntN(len(meters)-1)
	for _, i := range perm[:k] {
		if err := r.activateFirst(ctx, t, meters[i].Code, meters[i].Currency); err != nil {
			return err
		}
	}
	if r.rng.IntN(3) > 0 { // most customers pay taxes, from their second period on
		want := t.latestSetting()
		want.Taxes = r.someTaxRates(1 + r.rng.IntN(3))
		if err := r.putSettings(ctx, t, "taxes", settingsBody(want), want, 200, ""); err != nil {
			return err
		}
	}
	if r.rng.IntN(2) == 0 { // a customer who starts on a plan
		return r.subscribe(ctx, t)
	}
	return nil
}

// activateFirst activates a series' first version (effective now, mostly
// without dimensions) and waits until usage knows it: a fact before it is
// then accepted (and rated unpriced) rather than refused no_price_in_effect.
// That probe becomes one of the tenant's facts.
func (r *runner) activateFirst(ctx context.Context, t *Tenant, meter, currency string) error {
	t.Series[meter] = &Series{Meter: meter, Currency: currency}
	m := meterDef(meter)
	var dims map[string]string
	if len(m.Dims) > 0 && r.rng.IntN(4) == 0 {
		dims = map[string]string{m.Dims[0]: pickString(r.rng, propertyValues[m.Dims[0]])}
	}
	if err := r.sendPrice(ctx, t, meter, randomPricing(r.rng, currency), dims, "now", time.Time{}, 201, ""); err != nil {
		return err
	}
	s := t.Series[meter]
	if len(s.Versions) == 0 { // refused at a price limit: no series
		delete(t.Series, meter)
		return nil
	}
	v1 := s.Versions[0]
	f := &Fact{SourceEventID: "probe-" + meter, Meter: meter, Currency: currency, Qty: dec("1"),
		At: v1.Eff.Add(-time.Second), Props: r.properties(m)}
	if m.ValueProp != "" {
		if f.Props == nil {
			f.Props = map[string]string{}
		}
		f.Props[m.ValueProp] = pickString(r.rng, propertyValues[m.ValueProp])
	}
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		a, err := r.c.do(ctx, "usage", "POST", t.ID, "/usage", f.body(), nil)
		if err != nil {
			return err
		}
		if a.Status == 201 {
			var got usageAnswer
			if err := a.decode(&got); err != nil {
				return err
			}
			r.accept(t, f, s, got)
			r.note("#%d usage %s %s before the first price -> 201 (unpriced)", r.step, t.ID, f.SourceEventID)
			return nil
		}
		if a.Status != 422 || (a.Code() != "unknown_meter" && a.Code() != "no_price_in_effect") {
			return fail("usage", "%s: a fact before %s's first price: want 201 (or 422 no_price_in_effect/unknown_meter until usage learns the price), got %d %s",
				t.ID, meter, a.Status, clip(string(a.Body)))
		}
		if time.Now().After(deadline) {
			return fail("settle", "%s: usage did not learn %s's first price within %s", t.ID, meter, r.cfg.Settle)
		}
		// polled: usage learns the first price from meter's event
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *runner) activate(ctx context.Context, t *Tenant) error {
	m := meters[r.rng.IntN(len(meters))]
	if r.rng.IntN(4) == 0 && t.Series["ai_tokens"] != nil {
		// the one meter with two dimensions: where prices can overlap
		m = meterDef("ai_tokens")
	}
	s := t.Series[m.Code]
	if s == nil {
		r.note("#%d activate %s %s: first version", r.step, t.ID, m.Code)
		return r.activateFirst(ctx, t, m.Code, m.Currency)
	}
	p := randomPricing(r.rng, m.Currency)
	now := instant(r.now())
	last := s.Versions[len(s.Versions)-1].Eff
	safe := now.Add(r.cfg.Lead + 2*time.Second) // beyond any watermark meter can have published
	dims := r.priceDimensions(m)
	if s.ambiguous(dims) {
		eff := maxTime(safe, last).Add(time.Second)
		return r.sendPrice(ctx, t, m.Code, p, dims, "ambiguous", instant(eff), 409, "ambiguous_price")
	}
	if r.rng.IntN(40) == 0 { // a dimension the meter does not have
		return r.sendPrice(ctx, t, m.Code, p, map[string]string{"colour": "red"}, "unknown dimension", instant(maxTime(safe, last).Add(time.Second)), 400, "invalid_dimensions")
	}
	x := r.rng.IntN(100)
	switch {
	case x < 30: // now: takes effect after the published schedule, unless a later version is scheduled
		if last.After(now.Add(-time.Millisecond)) && !last.After(safe.Add(time.Second)) {
			break // whether it would be out of order depends on meter's watermark: make it explicit
		}
		if last.After(safe.Add(time.Second)) {
			return r.sendPrice(ctx, t, m.Code, p, dims, "now", time.Time{}, 422, "price_out_of_order")
		}
		return r.sendPrice(ctx, t, m.Code, p, dims, "now", time.Time{}, 201, "")
	case x < 40: // backdated
		return r.sendPrice(ctx, t, m.Code, p, dims, "backdated", now.Add(-time.Duration(1+r.rng.IntN(600))*time.Second), 422, "price_backdated")
	case x < 50: // before the last version's effectiveAt, after the watermark
		if last.After(safe.Add(2 * time.Millisecond)) {
			eff := safe.Add(time.Duration(r.rng.Int64N(int64(last.Sub(safe))-1000)) + time.Microsecond)
			return r.sendPrice(ctx, t, m.Code, p, dims, "out-of-order", instant(eff), 422, "price_out_of_order")
		}
	case x < 60: // an invalid price
		body, code := invalidPricing(r.rng)
		return r.sendRaw(ctx, t, m.Code, m.Currency, body, code)
	case x < 65: // the same effectiveAt as the last version, if still ahead
		if last.After(safe) {
			return r.sendPrice(ctx, t, m.Code, p, dims, "same-as-last", last, 201, "")
		}
	}
	// a future version
	eff := maxTime(safe, last).Add(time.Duration(r.rng.Int64N(int64(4 * time.Second))))
	return r.sendPrice(ctx, t, m.Code, p, dims, "future", instant(eff), 201, "")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

type priceAnswer struct {
	Version     int64     `json:"version"`
	EffectiveAt time.Time `json:"effectiveAt"`
	Model       string    `json:"model"`
	MeterCode   string    `json:"meterCode"`
	Currency    string    `json:"currency"`
}

func (r *runner) sendPrice(ctx context.Context, t *Tenant, meter string, p Pricing, dims map[string]string, how string, eff time.Time, wantStatus int, wantCode string) error {
	s := t.Series[meter]
	body := p.request()
	body["meterCode"], body["currency"] = meter, s.Currency
	if len(dims) > 0 {
		body["dimensions"] = dims
		how += " " + dimsKey(dims)
	}
	if !eff.IsZero() {
		body["effectiveAt"] = eff.Format(time.RFC3339Nano)
	}
	either, limit := false, ""
	if wantStatus == 201 {
		if limit, either = r.priceLimit(t, s, dims, eff); limit != "" && !either {
			wantStatus, wantCode = 422, "limit_exceeded"
		}
	}
	r.stats.Prices++
	sent := instant(r.now())
	a, err := r.c.do(ctx, "meter", "POST", t.ID, "/prices", body, map[string]string{"Idempotency-Key": r.key("price")})
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("#%d activate %s %s %s (%s", r.step, t.ID, meter, p, how)
	if !eff.IsZero() {
		desc += " " + eff.Format(time.RFC3339Nano)
	}
	if either && a.Status == 422 && a.Code() == "limit_exceeded" {
		wantStatus, wantCode = 422, "limit_exceeded" // its month was the full one
	}
	if wantCode == "limit_exceeded" && a.Status == wantStatus && a.Code() == wantCode {
		if limit == "entries" {
			r.stats.PricesAtEntries++
		} else {
			r.stats.PricesAtMonth++
		}
	}
	if a.Status != wantStatus || (wantCode != "" && a.Code() != wantCode) {
		r.note("%s) -> %d %s", desc, a.Status, a.Code())
		return fail("price", "%s %s: want %d %s, got %d %s", t.ID, meter, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus != 201 {
		r.note("%s) -> %d %s", desc, a.Status, a.Code())
		if wantCode == "ambiguous_price" {
			r.stats.Ambiguous++
		}
		return nil
	}
	var got priceAnswer
	if err := a.decode(&got); err != nil {
		return err
	}
	want := int64(len(s.Versions) + 1)
	if got.Version != want || got.Model != p.Model {
		return fail("price", "%s %s: want version %d model %s, got %s", t.ID, meter, want, p.Model, clip(string(a.Body)))
	}
	if !eff.IsZero() && !got.EffectiveAt.Equal(eff) {
		return fail("price", "%s %s: asked effectiveAt %s, got %s", t.ID, meter, eff, got.EffectiveAt)
	}
	if eff.IsZero() && (got.EffectiveAt.Before(sent) || got.EffectiveAt.After(instant(r.now()).Add(r.cfg.Lead+time.Second))) {
		return fail("price", "%s %s: effectiveAt %s of a price activated now (%s) is not within the schedule lead %s",
			t.ID, meter, got.EffectiveAt, sent, r.cfg.Lead)
	}
	s.Versions = append(s.Versions, Version{N: got.Version, Eff: got.EffectiveAt.UTC(), Pricing: p, Dims: dims})
	if len(dims) > 0 {
		r.stats.DimPrices++
	}
	r.note("%s) -> v%d effective %s", desc, got.Version, got.EffectiveAt.UTC().Format(time.RFC3339Nano))
	return nil
}

func (r *runner) sendRaw(ctx context.Context, t *Tenant, meter, currency string, body map[string]any, code string) error {
	body["meterCode"], body["currency"] = meter, currency
	r.stats.Prices++
	a, err := r.c.do(ctx, "meter", "POST", t.ID, "/prices", body, map[string]string{"Idempotency-Key": r.key("price")})
	if err != nil {
		return err
	}
	r.note("#%d activate %s %s invalid %v -> %d %s", r.step, t.ID, meter, body, a.Status, a.Code())
	if a.Status != 400 || a.Code() != code {
		return fail("price", "%s %s invalid price %v: want 400 %s, got %d %s", t.ID, meter, body, code, a.Status, clip(string(a.Body)))
	}
	return nil
}

func (r *runner) key(kind string) string {
	r.counter++
	return fmt.Sprintf("%s-%s-%d", r.cfg.Prefix, kind, r.counter)
}

// ---- usage ----

// occurredAt picks a time for a fact of series s (nil: an unpriced meter):
// anywhere since shortly before the tenant began, a version's effectiveAt
// exactly or a microsecond before it, a period boundary in the tenant's
// zone exactly or a microsecond either side, or just now; never in the
// future, and never in a period the scheduler is about to close (dueOpen).
func (r *runner) occurredAt(t *Tenant, s *Series) time.Time {
	at := r.occurredAt1(t, s)
	if now := r.now(); t.dueOpen(at, now) {
		return instant(now) // in the current period: it closes after now
	}
	return at
}

func (r *runner) occurredAt1(t *Tenant, s *Series) time.Time {
	now := instant(r.now().Add(-20 * time.Millisecond))
	lo := instant(t.Created.Add(-300 * time.Millisecond))
	x := r.rng.IntN(100)
	if x >= 80 && x < 92 { // at a period boundary of the tenant, in its zone
		var bounds []time.Time
		for p := t.periodOf(lo); t.end(p).Before(now); p = nextPeriod(p) {
			bounds = append(bounds, t.end(p))
		}
		if len(bounds) > 0 {
			b := bounds[r.rng.IntN(len(bounds))].Add(time.Duration(r.rng.IntN(3)-1) * time.Microsecond)
			if !b.Before(lo) && !b.After(now) {
				return b
			}
		}
	}
	if x >= 92 && x < 96 { // in an empty open period before a closed one, perhaps before the tenant began: late past it
		if at, ok := t.behindClosed(instant(t.Created.AddDate(0, -2, 0)), now, r.rng.Int64N); ok {
			r.stats.BehindClosedPicked++
			return at
		}
	}
	if s != nil && x < 25 {
		v := s.Versions[r.rng.IntN(len(s.Versions))]
		at := v.Eff
		if x < 10 {
			at = at.Add(-time.Microsecond)
		}
		if !at.After(now) {
			return at
		}
	}
	if x < 35 {
		return now
	}
	return instant(lo.Add(time.Duration(r.rng.Int64N(int64(now.Sub(lo)) + 1))))
}

// newFact makes a fresh fact for t (not sent yet); toBound aims its quantity
// at a price step of the line it will join.
func (r *runner) newFact(t *Tenant, toBound bool) (*Fact, *Series, string) {
	var meter string
	var s *Series
	priced := sortedKeys(t.Series)
	planned := t.planMeters()
	switch x := r.rng.IntN(40); {
	case x == 0:
		meter = ghostMeter
	case x < 16 && len(planned) > 0: // a meter its latest plan charges for
		meter = planned[r.rng.IntN(len(planned))]
		s = t.Series[meter]
	case x < 3 || len(priced) == 0: // any meter, perhaps one this tenant never priced
		m := meters[r.rng.IntN(len(meters))]
		meter, s = m.Code, t.Series[m.Code]
	default:
		meter = priced[r.rng.IntN(len(priced))]
		s = t.Series[meter]
	}
	t.nextEventID++
	f := &Fact{SourceEventID: fmt.Sprintf("e%d", t.nextEventID), Meter: meter, Qty: randomQty(r.rng), Props: r.properties(meterDef(meter))}
	if a := meterDef(meter).Agg; a != "" && a != "sum" {
		toBound = false // a step of the line's quantity is a sum's
	}
	how := ""
	if s != nil {
		f.Currency = s.Currency
		f.At = r.occurredAt(t, s)
	} else {
		f.At = instant(r.now().Add(-time.Second))
		if meter != ghostMeter && (r.rng.IntN(2) == 0 || (len(planned) > 0 && r.rng.IntN(4) > 0)) {
			f.Currency, f.NamesCurrency = meterDef(meter).Currency, true // accepted without a price: rated unpriced in it
		}
	}
	if toBound && s != nil {
		f.At = instant(r.now().Add(-20 * time.Millisecond))
		if t.dueOpen(f.At, r.now()) { // just after a clock move past an empty period's close
			f.At = instant(r.now())
		}
		if v := s.inEffect(f.At, f.Props); v != nil {
			p, _ := t.target(f.At)
			q := decimal.Zero
			for _, g := range t.Facts {
				if g.Period == p && g.Meter == meter && g.Plan == "" && g.Version == v.N && dimsKey(g.Dims) == dimsKey(v.Dims) {
					q = q.Add(g.Qty)
				}
			}
			var ahead []decimal.Decimal
			for _, b := range v.Pricing.Bounds() {
				if b.GreaterThan(q) {
					ahead = append(ahead, b)
				}
			}
			if len(ahead) > 0 {
				b := ahead[r.rng.IntN(len(ahead))]
				switch r.rng.IntN(3) {
				case 0:
					f.Qty, how = b.Sub(q), "to the bound "+b.String()
				case 1:
					f.Qty, how = b.Sub(q).Add(quantum), "just past the bound "+b.String()
				default:
					f.Qty, how = b.Sub(q).Sub(quantum), "just below the bound "+b.String()
					if f.Qty.Sign() < 0 {
						f.Qty = decimal.Zero
					}
				}
			}
		}
	}
	return f, s, how
}

// expectUsage is the model's answer to a new fact: 201 and the fact as
// rated, or a refusal code.
func (r *runner) expectUsage(t *Tenant, f *Fact, s *Series) (int, string) {
	if prev := t.byIdentity[f.SourceEventID]; prev != nil {
		if prev.Meter == f.Meter && prev.Qty.Equal(f.Qty) && prev.At.Equal(f.At) && sameProps(prev.Props, f.Props) {
			return 200, ""
		}
		return 409, "source_event_conflict"
	}
	if f.At.After(r.now().Add(maxFutureSkew)) {
		return 422, "occurred_in_future"
	}
	if m := meterDef(f.Meter); m.ValueProp != "" && f.Props[m.ValueProp] == "" {
		return 400, "missing_value_property"
	}
	if f.Meter == ghostMeter {
		return 422, "unknown_meter"
	}
	if s == nil && (!f.NamesCurrency || mutation == "no-series-refused") { // a meter of the catalog this tenant has no price for, no currency named (the mutation: refused even naming one, as before decision 0019)
		return 422, "no_price_in_effect"
	}
	return 201, "" // before the first price, matching no entry, or no price at all: unpriced
}

// maxFutureSkew: usage refuses a fact that occurred further ahead of its
// clock (occurred_in_future).
const maxFutureSkew = 5 * time.Minute

type usageAnswer struct {
	UsageID string `json:"usageId"`
	EventID string `json:"eventId"`
}

// accept records a fact the service accepted, with the charge it must get.
func (r *runner) accept(t *Tenant, f *Fact, s *Series, got usageAnswer) {
	f.UsageID, f.EventID = got.UsageID, got.EventID
	if s == nil { // without any price of its own for the meter
		r.stats.NoSeries++
	}
	t.rate(f, s)
	if r.stats.ByAggregation == nil {
		r.stats.ByAggregation = map[string]int{}
	}
	r.stats.ByAggregation[aggName(f.Meter)]++
	switch {
	case f.Version == 0:
		r.stats.Unpriced++
	case f.Plan != "":
		r.stats.PlanPriced++
	case len(f.Dims) > 0:
		r.stats.DimPriced++
	}
	f.Period, f.Late = t.rated(f.At)
	if f.Late {
		r.stats.Late++
		if !t.period(t.periodOf(f.At)).Closed {
			r.stats.LateBehindClosed++ // its own period open, a later one closed
		}
	}
	t.Facts = append(t.Facts, f)
	t.byIdentity[f.SourceEventID] = f
	t.Dirty = true
	r.stats.Accepted++
}

func (r *runner) usage(ctx context.Context, t *Tenant, toBound bool) error {
	f, s, how := r.newFact(t, toBound)
	if !toBound && r.rng.IntN(50) == 0 {
		// more than usage's five minutes ahead of the (moved) clock
		f.At, how = instant(r.now().Add(maxFutureSkew+time.Second+time.Duration(r.rng.Int64N(int64(time.Hour))))), "in the future"
	}
	wantStatus, wantCode := r.expectUsage(t, f, s)
	r.stats.Facts++
	a, err := r.c.do(ctx, "usage", "POST", t.ID, "/usage", f.body(), nil)
	if err != nil {
		return err
	}
	r.note("#%d usage %s %s %s %s at %s %s -> %d %s", r.step, t.ID, f.SourceEventID, f.Meter, f.Qty, f.At.Format(time.RFC3339Nano), how, a.Status, a.Code())
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("usage", "%s fact %s (%s %s at %s): want %d %s, got %d %s", t.ID, f.SourceEventID, f.Meter, f.Qty,
			f.At.Format(time.RFC3339Nano), wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus != 201 {
		r.stats.Refused++
		return nil
	}
	var got usageAnswer
	if err := a.decode(&got); err != nil {
		return err
	}
	r.accept(t, f, s, got)
	if toBound && how != "" && r.rng.IntN(2) == 0 {
		// the line now ends at (or next to) a price step: billing's estimate must price it so
		if err := r.settle(ctx, t); err != nil {
			return err
		}
		return r.checkEstimate(ctx, t, f.Period)
	}
	return nil
}

func (r *runner) replayOrConflict(ctx context.Context, t *Tenant, conflict bool) error {
	if len(t.Facts) == 0 {
		r.note("#%d replay/conflict %s: skipped, no fact", r.step, t.ID)
		return nil
	}
	orig := t.Facts[r.rng.IntN(len(t.Facts))]
	f := *orig
	what := "replay"
	if conflict {
		switch r.rng.IntN(3) {
		case 0:
			f.Qty, what = f.Qty.Add(decimal.New(1, -3)), "conflict (quantity)"
		case 1:
			f.At, what = f.At.Add(-time.Microsecond), "conflict (occurredAt)"
			if r.rng.IntN(2) == 0 {
				f.At, what = orig.At, "conflict (properties)"
				f.Props = map[string]string{"trace.id": "other"}
				for k, v := range orig.Props {
					if k != "trace.id" {
						f.Props[k] = v
					}
				}
			}
		default:
			for _, m := range meters {
				if m.Code != f.Meter && t.Series[m.Code] != nil && m.ValueProp == "" {
					f.Meter, what = m.Code, "conflict (meter)"
					break
				}
			}
			if f.Meter == orig.Meter {
				f.Qty, what = f.Qty.Add(decimal.NewFromInt(1)), "conflict (quantity)"
			}
		}
		r.stats.Conflicts++
	} else {
		// the same quantity written otherwise is still the same fact
		if r.rng.IntN(3) == 0 && f.Qty.Exponent() < 0 {
			f.Qty = decimal.RequireFromString(f.Qty.StringFixed(-f.Qty.Exponent() + 2))
			what = "replay (quantity " + f.Qty.StringFixed(-f.Qty.Exponent()+2) + ")"
		}
		r.stats.Replays++
	}
	body := f.body()
	if what != "replay" && !conflict {
		body["quantity"] = orig.Qty.StringFixed(-orig.Qty.Exponent() + 2)
	}
	wantStatus, wantCode := r.expectUsage(t, &f, t.Series[f.Meter])
	r.stats.Facts++
	a, err := r.c.do(ctx, "usage", "POST", t.ID, "/usage", body, nil)
	if err != nil {
		return err
	}
	r.note("#%d %s %s %s -> %d %s", r.step, what, t.ID, orig.SourceEventID, a.Status, a.Code())
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("usage", "%s %s of %s: want %d %s, got %d %s", t.ID, what, orig.SourceEventID, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus == 200 {
		var got usageAnswer
		if err := a.decode(&got); err != nil {
			return err
		}
		if got.UsageID != orig.UsageID || got.EventID != orig.EventID {
			return fail("usage", "%s replay of %s: want usage %s event %s, got %s", t.ID, orig.SourceEventID, orig.UsageID, orig.EventID, clip(string(a.Body)))
		}
	}
	return nil
}

func (r *runner) batch(ctx context.Context, t *Tenant) error {
	items := r.batchItems(t, 2+r.rng.IntN(8))
	events := make([]map[string]any, len(items))
	var desc []string
	for i, it := range items {
		events[i] = it.f.body()
		desc = append(desc, fmt.Sprintf("%s %s %s %s at %s", it.what, it.f.SourceEventID, it.f.Meter, it.f.Qty, it.f.At.Format(time.RFC3339Nano)))
	}
	r.stats.Facts += len(items)
	a, err := r.c.do(ctx, "usage", "POST", t.ID, "/usage:batch", map[string]any{"events": events}, nil)
	if err != nil {
		return err
	}
	r.note("#%d batch %s [%s] -> %d", r.step, t.ID, strings.Join(desc, "; "), a.Status)
	if a.Status != 200 {
		return fail("usage", "%s batch: want 200, got %d %s", t.ID, a.Status, clip(string(a.Body)))
	}
	var got struct {
		Results []batchResult `json:"results"`
	}
	if err := a.decode(&got); err != nil {
		return err
	}
	if len(got.Results) != len(items) {
		return fail("usage", "%s batch of %d: %d results", t.ID, len(items), len(got.Results))
	}
	for i, it := range items {
		if err := r.batchResult(t, i, it, got.Results[i]); err != nil {
			return err
		}
	}
	return nil
}

// batchItem is one event of a usage batch and the model's answer to it.
type batchItem struct {
	f          *Fact
	s          *Series
	status     int
	code, what string
	orig       *Fact // the fact replayed or conflicted with
}

// batchResult is usage's answer to one event of a batch.
type batchResult struct {
	Status  int    `json:"status"`
	UsageID string `json:"usageId"`
	EventID string `json:"eventId"`
	Code    string `json:"code"`
}

// batchItems makes n events for a batch: replays and conflicts of distinct
// accepted facts (three in ten, while there are any), and new facts.
func (r *runner) batchItems(t *Tenant, n int) []batchItem {
	var items []batchItem
	used := map[string]bool{}
	for len(items) < n {
		x := r.rng.IntN(10)
		if x < 3 && len(t.Facts) > 0 {
			orig := t.Facts[r.rng.IntN(len(t.Facts))]
			if used[orig.SourceEventID] {
				continue
			}
			used[orig.SourceEventID] = true
			f := *orig
			what := "replay"
			if x == 0 {
				f.Qty, what = f.Qty.Add(decimal.NewFromInt(2)), "conflict"
			}
			st, code := r.expectUsage(t, &f, t.Series[f.Meter])
			items = append(items, batchItem{&f, t.Series[f.Meter], st, code, what, orig})
			continue
		}
		f, s, _ := r.newFact(t, false)
		st, code := r.expectUsage(t, f, s)
		items = append(items, batchItem{f, s, st, code, "new", nil})
	}
	return items
}

// batchResult checks usage's answer to item i of a batch against the
// model's and records it.
func (r *runner) batchResult(t *Tenant, i int, it batchItem, res batchResult) error {
	if res.Status != it.status || res.Code != it.code {
		return fail("usage", "%s batch item %d (%s %s): want %d %s, got %d %s", t.ID, i, it.what, it.f.SourceEventID, it.status, it.code, res.Status, res.Code)
	}
	switch {
	case it.status == 201:
		r.accept(t, it.f, it.s, usageAnswer{res.UsageID, res.EventID})
	case it.status == 200:
		r.stats.Replays++
		if res.UsageID != it.orig.UsageID || res.EventID != it.orig.EventID {
			return fail("usage", "%s batch replay of %s: want usage %s, got %s", t.ID, it.orig.SourceEventID, it.orig.UsageID, res.UsageID)
		}
	case it.status == 409:
		r.stats.Conflicts++
	default:
		r.stats.Refused++
	}
	return nil
}

// ---- adjustments ----

func (r *runner) adjust(ctx context.Context, t *Tenant) error {
	var rated []*Fact
	for _, f := range t.Facts {
		if f.ChargeID != "" {
			rated = append(rated, f)
		}
	}
	if len(rated) == 0 {
		if t.Dirty && r.rng.IntN(2) == 0 {
			r.note("#%d adjust %s: settle first", r.step, t.ID)
			return r.settle(ctx, t)
		}
		r.note("#%d adjust %s: skipped, no charge listed yet", r.step, t.ID)
		return nil
	}
	f := rated[r.rng.IntN(len(rated))]
	amount, currency, what, err := r.adjustment(ctx, t, f)
	if err != nil {
		return err
	}
	wantStatus, wantCode, err := r.expectAdjustment(ctx, t, f, amount, currency)
	if err != nil {
		return err
	}
	p := t.period(f.Period)
	adj := &Adjustment{Key: r.key("adj"), Fact: f, Period: f.Period, Currency: currency, Amount: amount, AfterClose: p.Closed,
		Body: map[string]any{"correctionOf": f.ChargeID, "amount": amount.String(), "currency": currency, "reason": what}}
	a, err := r.c.do(ctx, "billing", "POST", t.ID, "/adjustments", adj.Body, map[string]string{"Idempotency-Key": adj.Key})
	if err != nil {
		return err
	}
	r.note("#%d adjust %s %s on %s (%s, period %s%s): %s %s -> %d %s", r.step, t.ID, what, f.SourceEventID, f.Meter, f.Period,
		map[bool]string{true: ", closed", false: ""}[p.Closed], amount, currency, a.Status, a.Code())
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("adjustment", "%s %s of %s %s on charge of %s (period %s): want %d %s, got %d %s", t.ID, what, amount, currency,
			f.SourceEventID, f.Period, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus != 201 {
		switch wantCode {
		case "credit_exceeds_charges":
			r.stats.CreditsRefused++
		case "limit_exceeded":
			r.stats.AdjustmentsAtLimit++
		}
		return nil
	}
	return r.adjusted(t, f, adj, a)
}

// adjustment picks an adjustment of the charge of f: a debit, a credit
// (small, all that is left, a minor unit more, far too much), an amount
// finer than the minor unit or one in another currency; what describes it.
func (r *runner) adjustment(ctx context.Context, t *Tenant, f *Fact) (amount decimal.Decimal, currency, what string, err error) {
	c := f.Currency
	unit := decimal.New(1, -minor(c))
	currency = c
	x := r.rng.IntN(100)
	switch {
	case x < 15: // a debit
		amount, what = unit.Mul(decimal.NewFromInt(int64(1+r.rng.IntN(500)))), "debit"
	case x < 23: // finer than the minor unit
		amount, what = decimal.New(-int64(1+r.rng.IntN(9)), -minor(c)-1).Sub(unit), "too precise"
	case x < 30: // another currency than the charge's
		for _, o := range sortedKeys(minorUnits) {
			if o != c && r.rng.IntN(2) == 0 {
				currency = o
				break
			}
		}
		if currency == c {
			currency = "EUR"
			if c == "EUR" {
				currency = "USD"
			}
		}
		amount, what = decimal.NewFromInt(1), "other currency"
	case x < 50: // exactly what is left to credit
		if err := r.settleIfDirty(ctx, t); err != nil {
			return amount, "", "", err
		}
		amount, what = floorMinor(t.room(f.Period, c, nil), c).Neg(), "credit of all that is left"
	case x < 62: // a minor unit more than is left
		if err := r.settleIfDirty(ctx, t); err != nil {
			return amount, "", "", err
		}
		amount, what = floorMinor(t.room(f.Period, c, nil), c).Add(unit).Neg(), "credit of a minor unit more than is left"
	case x < 68: // far too much
		amount, what = floorMinor(t.room(f.Period, c, nil).Mul(decimal.NewFromInt(2)), c).Add(unit).Neg(), "credit of twice what is left"
	default: // a small credit
		room := t.room(f.Period, c, confirmed)
		max := floorMinor(room.Div(decimal.NewFromInt(3)), c).Div(unit).IntPart()
		if max < 1 {
			max = 1
		}
		amount, what = unit.Mul(decimal.NewFromInt(1+r.rng.Int64N(max))).Neg(), "small credit"
	}
	if amount.IsZero() {
		amount = unit.Neg()
	}
	return amount, currency, what, nil
}

// maxAdjustments is the money stack's BILLING_MAX_ADJUSTMENTS: an
// adjustment that would give a tenant's period more, before or after its
// close, is refused 422 limit_exceeded. Small, so a run reaches it.
const maxAdjustments = 16

// partsFoldAt is the money stack's INVOICE_PARTS_FOLD_AT and
// BILLING_PARTS_FOLD_AT: a line's parts are folded past two, so the open
// invoices, the alerts' figures, billing's estimates and its credits'
// checks the model checks are read from folded parts throughout the run,
// not only once a line has had 32 batches in a period.
const partsFoldAt = 2

// BillingEnv are the billing service's settings for the money test: quick
// scheduled closes, the adjustments' and subscriptions' limits the model
// predicts and the parts' fold (partsFoldAt).
var BillingEnv = map[string]string{"BILLING_CLOSE_INTERVAL": "200ms", "BILLING_MAX_ADJUSTMENTS": fmt.Sprint(maxAdjustments),
	"BILLING_MAX_SUBSCRIPTIONS": fmt.Sprint(maxSubscriptions), "BILLING_PARTS_FOLD_AT": fmt.Sprint(partsFoldAt)}

// maxPriceEntries and maxMonthlyVersions are the money stack's
// METER_MAX_PRICE_ENTRIES and METER_MAX_PRICE_VERSIONS_PER_MONTH: an
// activation that would name a tenant's price entry (a series' dimension
// set) past the first, or be a version past the second taking effect in
// its UTC month, is refused 422 limit_exceeded. Small, so a run reaches
// both.
const (
	maxPriceEntries    = 14
	maxMonthlyVersions = 8
)

// MeterEnv are the meter service's settings for the money test: the
// schedule's lead and the price and plan limits the model predicts.
func MeterEnv(lead time.Duration) map[string]string {
	return map[string]string{"METER_SCHEDULE_LEAD": lead.String(),
		"METER_MAX_PRICE_ENTRIES": fmt.Sprint(maxPriceEntries), "METER_MAX_PRICE_VERSIONS_PER_MONTH": fmt.Sprint(maxMonthlyVersions),
		"METER_MAX_PLAN_VERSIONS_PER_MONTH": fmt.Sprint(maxPlanVersions)}
}

// priceEntries is how many price entries (a series' dimension set, its
// default included) meter accepted for the tenant.
func (t *Tenant) priceEntries() int {
	n := 0
	for _, s := range t.Series {
		seen := map[string]bool{}
		for _, v := range s.Versions {
			if k := dimsKey(v.Dims); !seen[k] {
				seen[k] = true
				n++
			}
		}
	}
	return n
}

// versionsInMonth is how many of the tenant's accepted price versions take
// effect in the UTC month of at.
func (t *Tenant) versionsInMonth(at time.Time) int {
	y, m, _ := at.UTC().Date()
	n := 0
	for _, s := range t.Series {
		for _, v := range s.Versions {
			if vy, vm, _ := v.Eff.UTC().Date(); vy == y && vm == m {
				n++
			}
		}
	}
	return n
}

// priceLimit is what meter's price limits make of a version of s named
// dims taking effect at eff (zero: now, within the schedule's lead): the
// limit that refuses it 422 limit_exceeded ("entries" or "month"; ""
// none), and either when the lead spans the end of a UTC month with one
// month at its limit and the other not (the version's month is known from
// the answer only).
func (r *runner) priceLimit(t *Tenant, s *Series, dims map[string]string, eff time.Time) (limit string, either bool) {
	newEntry := true
	for _, v := range s.Versions {
		if dimsKey(v.Dims) == dimsKey(dims) {
			newEntry = false
			break
		}
	}
	if newEntry && t.priceEntries() >= maxPriceEntries {
		return "entries", false
	}
	from, to := eff, eff
	if eff.IsZero() {
		from = instant(r.now())
		to = from.Add(r.cfg.Lead + time.Second)
	}
	a, b := t.versionsInMonth(from) >= maxMonthlyVersions, t.versionsInMonth(to) >= maxMonthlyVersions
	if a || b {
		limit = "month"
	}
	return limit, a != b
}

// adjustmentsOf is how many adjustments billing accepted for the tenant's
// period p.
func (t *Tenant) adjustmentsOf(p string) int {
	n := 0
	for _, a := range t.Adjs {
		if a.Period == p {
			n++
		}
	}
	return n
}

// confirmed: billing has listed the fact's charge.
func confirmed(g *Fact) bool { return g.ChargeID != "" }

// expectAdjustment is the model's answer to an adjustment of amount in
// currency on the charge of f. A credit that only the charges billing has
// not listed yet could cover settles the tenant first, so the model knows.
func (r *runner) expectAdjustment(ctx context.Context, t *Tenant, f *Fact, amount decimal.Decimal, currency string) (int, string, error) {
	c := f.Currency
	switch {
	case !wholeMinor(amount, currency):
		return 422, "amount_precision", nil
	case currency != c:
		return 422, "currency_mismatch", nil
	case t.adjustmentsOf(f.Period) >= maxAdjustments:
		return 422, "limit_exceeded", nil
	case amount.Sign() < 0:
		if t.Dirty { // latest's figure may fall as facts arrive: know every charge first
			if err := r.settle(ctx, t); err != nil {
				return 0, "", err
			}
		}
		lower := t.room(f.Period, c, confirmed).Add(amount) // what billing has listed at least
		upper := t.room(f.Period, c, nil).Add(amount)       // every accepted fact
		if lower.Sign() < 0 && upper.Sign() >= 0 {
			if err := r.settle(ctx, t); err != nil {
				return 0, "", err
			}
			upper = t.room(f.Period, c, nil).Add(amount)
		}
		if upper.Sign() < 0 {
			return 422, "credit_exceeds_charges", nil
		}
	}
	return 201, "", nil
}

// adjusted checks and records an accepted adjustment (a, answered 201).
func (r *runner) adjusted(t *Tenant, f *Fact, adj *Adjustment, a answer) error {
	var got struct {
		AdjustmentID string `json:"adjustmentId"`
		EventID      string `json:"eventId"`
		Period       string `json:"period"`
	}
	if err := a.decode(&got); err != nil {
		return err
	}
	if got.Period != f.Period {
		return fail("adjustment", "%s adjustment on %s: want period %s, got %s", t.ID, f.SourceEventID, f.Period, got.Period)
	}
	adj.AdjustmentID, adj.EventID, adj.Raw = got.AdjustmentID, got.EventID, a.Body
	t.Adjs = append(t.Adjs, adj)
	r.stats.Adjustments++
	if adj.AfterClose {
		r.stats.Corrections++
	}
	return nil
}

func (r *runner) adjReplay(ctx context.Context, t *Tenant) error {
	if len(t.Adjs) == 0 {
		r.note("#%d adj-replay %s: skipped, no adjustment", r.step, t.ID)
		return nil
	}
	adj := t.Adjs[r.rng.IntN(len(t.Adjs))]
	body := adj.Body
	wantStatus, wantCode, what := 201, "", "replay"
	if r.rng.IntN(3) == 0 {
		body = map[string]any{}
		for k, v := range adj.Body {
			body[k] = v
		}
		body["reason"] = "another reason"
		wantStatus, wantCode, what = 422, "idempotency_key_reused", "key reused"
	}
	a, err := r.c.do(ctx, "billing", "POST", t.ID, "/adjustments", body, map[string]string{"Idempotency-Key": adj.Key})
	if err != nil {
		return err
	}
	r.note("#%d adj-replay %s %s of %s -> %d %s", r.step, t.ID, what, adj.Key, a.Status, a.Code())
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("adjustment", "%s %s of adjustment %s: want %d %s, got %d %s", t.ID, what, adj.Key, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus == 201 {
		var got struct {
			AdjustmentID string `json:"adjustmentId"`
		}
		if err := a.decode(&got); err != nil {
			return err
		}
		if got.AdjustmentID != adj.AdjustmentID || a.Header.Get("Idempotent-Replayed") != "true" {
			return fail("adjustment", "%s replay of adjustment %s: want %s replayed, got %s (Idempotent-Replayed %q)", t.ID, adj.Key,
				adj.AdjustmentID, got.AdjustmentID, a.Header.Get("Idempotent-Replayed"))
		}
	}
	return nil
}

// ---- closes ----

func (r *runner) close(ctx context.Context) error {
	// the oldest tenant with an open period that has begun
	var t *Tenant
	now := r.now()
	for _, c := range r.active {
		if c.earliestOpen() <= c.periodOf(now) && len(c.Facts) > 0 {
			t = c
			break
		}
	}
	if r.rng.IntN(4) == 0 { // the period in progress while an earlier one is open
		for _, c := range r.active {
			p1, blocking, ok := c.laterClose(now)
			switch {
			case !ok:
			case blocking != "": // it has something to bill: refused
				return r.closeOutOfOrder(ctx, c, blocking, p1)
			default: // the earlier open ones are empty: they do not hold it back
				r.stats.LaterCloses++
				return r.closePeriod(ctx, c, p1)
			}
		}
	}
	if t == nil || r.rng.IntN(8) == 0 {
		t = r.pickTenant()
		if r.rng.IntN(2) == 0 {
			// a period that has not begun in the tenant's zone
			p := nextPeriod(t.periodOf(now))
			a, err := r.c.do(ctx, "billing", "POST", t.ID, "/periods/"+p+"/close", nil, map[string]string{"Idempotency-Key": r.key("close")})
			if err != nil {
				return err
			}
			r.note("#%d close %s %s (not begun) -> %d %s", r.step, t.ID, p, a.Status, a.Code())
			if a.Status != 422 || a.Code() != "period_in_future" {
				return fail("close", "%s close of %s: want 422 period_in_future, got %d %s", t.ID, p, a.Status, clip(string(a.Body)))
			}
			return nil
		}
		var closed []string
		for _, p := range t.Periods {
			if p.Closed {
				closed = append(closed, p.Name)
			}
		}
		if len(closed) == 0 {
			r.note("#%d close %s: skipped, nothing closed to close again", r.step, t.ID)
			return nil
		}
		sort.Strings(closed)
		p := closed[r.rng.IntN(len(closed))]
		a, err := r.c.do(ctx, "billing", "POST", t.ID, "/periods/"+p+"/close", nil, map[string]string{"Idempotency-Key": r.key("close")})
		if err != nil {
			return err
		}
		r.note("#%d close %s %s again -> %d %s", r.step, t.ID, p, a.Status, a.Code())
		if a.Status != 202 {
			return fail("close", "%s second close of %s: want 202, got %d %s", t.ID, p, a.Status, clip(string(a.Body)))
		}
		return r.checkInvoices(ctx, t, p)
	}
	return r.closePeriod(ctx, t, t.earliestOpen())
}

// closePeriod closes t's period p, which billing must accept.
func (r *runner) closePeriod(ctx context.Context, t *Tenant, p string) error {
	if err := r.settle(ctx, t); err != nil { // every accepted fact is rated into p before the close
		return err
	}
	if err := r.alertPoint(ctx, t, false); err != nil { // decided while p's invoices are open
		return err
	}
	a, err := r.c.do(ctx, "billing", "POST", t.ID, "/periods/"+p+"/close", nil, map[string]string{"Idempotency-Key": r.key("close")})
	if err != nil {
		return err
	}
	r.note("#%d close %s %s -> %d %s", r.step, t.ID, p, a.Status, a.Code())
	if a.Status != 202 {
		return fail("close", "%s close of %s: want 202, got %d %s", t.ID, p, a.Status, clip(string(a.Body)))
	}
	r.markClosed(t, p)
	r.stats.Closes++
	return r.checkInvoices(ctx, t, p)
}

// closeOutOfOrder closes p1 while the earlier p0 has charges and is open:
// billing refuses it (periods close in order) and nothing changes.
func (r *runner) closeOutOfOrder(ctx context.Context, t *Tenant, p0, p1 string) error {
	if err := r.settle(ctx, t); err != nil { // p0's charges are rated before the close
		return err
	}
	a, err := r.c.do(ctx, "billing", "POST", t.ID, "/periods/"+p1+"/close", nil, map[string]string{"Idempotency-Key": r.key("close")})
	if err != nil {
		return err
	}
	r.note("#%d close %s %s before %s -> %d %s", r.step, t.ID, p1, p0, a.Status, a.Code())
	wantStatus, wantCode := 422, "earlier_period_open"
	if mutation == "close-out-of-order" { // a deliberately wrong model: any begun period may close
		wantStatus, wantCode = 202, ""
	}
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("close", "%s close of %s while %s is open: want %d %s, got %d %s", t.ID, p1, p0, wantStatus, wantCode,
			a.Status, clip(string(a.Body)))
	}
	r.stats.OutOfOrderCloses++
	return nil
}

// String of the run's first steps, for a failure report.
func (f *Failure) Report(maxSteps int) string {
	var b strings.Builder
	steps := f.Steps
	if len(steps) > maxSteps {
		fmt.Fprintf(&b, "  ... %d earlier steps\n", len(steps)-maxSteps)
		steps = steps[len(steps)-maxSteps:]
	}
	for _, s := range steps {
		b.WriteString("  " + s + "\n")
	}
	return b.String()
}
