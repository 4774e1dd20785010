package money

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Alerts (decision 0022, DESIGN.md section 3a): a tenant's thresholds on a
// meter's period quantity (usage) or a currency's running total (spend:
// the open invoice's subtotal, its charge lines priced over their
// quantities so far plus its adjustment lines; no fees, taxes or credit
// grants, which come with the issue). Invoice decides an alert in the
// transaction that applies a charge or an adjustment touching its figure
// (the meter, or the currency, of a period whose invoice is open): the
// first time the figure there is at or above the threshold, it records the
// crossing of (alert, period) and its alert.triggered intent, Webhook-Id
// alert_<alertId>_<period>; never again in that period, however the figure
// falls (a credit) and rises again.
//
// The model cannot see which charges invoice applies together, nor in
// which order, so it decides at points where invoice has applied every
// fact and adjustment it accepted (alertPoint: before an alert is created
// or deleted, before a close or a clock move, at every check, and after
// some operations that touch an alert's figure). Between two points, an
// alert live through them whose figure in a period was touched is told
// for certain when the figure at the second point reaches its threshold
// (the last transaction touching it saw every charge of it), and may have
// been told when some subset of the touching facts and adjustments would
// have taken it there (a figure that is not monotone: spend under volume
// pricing or after a credit, latest); otherwise it is not told.

// maxAlerts is the money stack's INVOICE_MAX_ALERTS: a tenant's live
// alerts past it are refused 422 limit_exceeded.
const maxAlerts = 4

// HookServiceEnv are the invoice service's settings for the money test:
// its receiver's loopback address allowed over http, quick polls and
// retries, the alerts' limit and the parts' fold (partsFoldAt).
var HookServiceEnv = map[string]string{
	"WEBHOOK_ALLOW_NETS": "127.0.0.0/8", "WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_POLL_INTERVAL": "50ms",
	"WEBHOOK_BACKOFF_BASE": "100ms", "WEBHOOK_BACKOFF_MAX": "1s", "INVOICE_MAX_ALERTS": fmt.Sprint(maxAlerts),
	"INVOICE_PARTS_FOLD_AT": fmt.Sprint(partsFoldAt),
}

// Alert is a tenant's alert as the model knows it, and what it predicts
// of each period.
type Alert struct {
	ID        string
	Kind      string // usage | spend
	Meter     string // a usage alert's
	Currency  string // a spend alert's
	Threshold decimal.Decimal
	Deleted   bool
	Periods   map[string]*alertPeriod
}

// alertPeriod is what the model predicts of one alert in one period.
type alertPeriod struct {
	// Told is how many alert.triggered deliveries are certain (one: the
	// mutation alert-retold-after-drop predicts more).
	Told int
	// May: before it was certain, a figure between two points may have
	// reached the threshold: at most one delivery (exactly Told once
	// certain).
	May bool
	// Below: seen below the threshold at a point after it was told.
	Below bool
	// Bound is the figure at the point that made it certain: a monotone
	// figure told there was at most this.
	Bound decimal.Decimal
}

func (a *Alert) String() string {
	if a.Kind == "usage" {
		return fmt.Sprintf("usage alert %s on %s (%s) at %s", a.ID, a.Meter, aggName(a.Meter), a.Threshold)
	}
	return fmt.Sprintf("spend alert %s on %s at %s", a.ID, a.Currency, a.Threshold)
}

func (a *Alert) period(p string) *alertPeriod {
	st := a.Periods[p]
	if st == nil {
		st = &alertPeriod{}
		a.Periods[p] = st
	}
	return st
}

// monotone: no fact lowers the figure (quantities are never negative), so
// the figure at a point bounds every figure before it.
func (a *Alert) monotone() bool {
	if a.Kind != "usage" {
		return false
	}
	switch aggName(a.Meter) {
	case "sum", "count", "max", "unique_count":
		return true
	}
	return false
}

// watches: fact f moves the alert's figure (of f's period).
func (a *Alert) watches(f *Fact) bool {
	if a.Kind == "usage" {
		return f.Meter == a.Meter
	}
	return f.Currency == a.Currency
}

// alertReached: a figure at or above the threshold reaches it (decision
// 0022).
func alertReached(threshold, figure decimal.Decimal) bool {
	if mutation == "alert-strictly-above" { // a deliberately wrong model: only a figure above the threshold reaches it
		return figure.GreaterThan(threshold)
	}
	return figure.GreaterThanOrEqual(threshold)
}

// alertFigure is a's figure in period p over the facts and adjustments
// in and inAdj admit (nil: all): the meter's aggregation over its facts of
// the period (false without any: invoice has no figure), or the open
// invoice's subtotal in the currency.
func (t *Tenant) alertFigure(a *Alert, p string, in func(*Fact) bool, inAdj func(*Adjustment) bool) (decimal.Decimal, bool) {
	if a.Kind == "usage" {
		var facts []*Fact
		for _, f := range t.Facts {
			if f.Period == p && f.Meter == a.Meter && (in == nil || in(f)) {
				facts = append(facts, f)
			}
		}
		if len(facts) == 0 {
			return decimal.Zero, false
		}
		return aggregate(meterDef(a.Meter), facts), true
	}
	sum := decimal.Zero
	for _, l := range t.lines(p, a.Currency, in) {
		sum = sum.Add(l.Amount)
	}
	for _, x := range t.Adjs {
		if x.Period == p && x.Currency == a.Currency && !x.AfterClose && (inAdj == nil || inAdj(x)) {
			sum = sum.Add(x.Amount)
		}
	}
	return sum, true
}

func (t *Tenant) liveAlerts() []*Alert {
	var out []*Alert
	for _, a := range t.Alerts {
		if !a.Deleted {
			out = append(out, a)
		}
	}
	return out
}

// registerHook registers the receiver as the tenant's webhook endpoint.
func (r *runner) registerHook(ctx context.Context, t *Tenant) error {
	a, err := r.c.do(ctx, "invoice", "POST", t.ID, "/webhook-endpoints", map[string]any{"url": r.cfg.Hooks.endpoint(t.ID)}, nil)
	if err != nil {
		return err
	}
	var ep struct {
		Secret string `json:"secret"`
	}
	if a.Status != 201 {
		return fail("alert", "%s register webhook endpoint: want 201, got %d %s", t.ID, a.Status, clip(string(a.Body)))
	}
	if err := a.decode(&ep); err != nil {
		return err
	}
	r.cfg.Hooks.setSecret(t.ID, ep.Secret)
	r.note("#%d webhook endpoint of %s registered", r.step, t.ID)
	return nil
}

// alertPoint waits until invoice has applied every fact and adjustment
// of t the model accepted (its open invoices read as the model's), then
// decides t's alerts over what was applied since the last point. force
// waits even for a tenant without alerts (one is about to be created).
func (r *runner) alertPoint(ctx context.Context, t *Tenant, force bool) error {
	if r.cfg.Hooks == nil || (len(t.Alerts) == 0 && !force) {
		return nil // nothing to decide; the first alert's creation waits for all
	}
	if len(t.Facts) > t.seenFacts || len(t.Adjs) > t.seenAdjs {
		if err := r.waitApplied(ctx, t); err != nil {
			return err
		}
	}
	r.stats.AlertPoints++
	r.decideAlerts(t)
	t.seenFacts, t.seenAdjs = len(t.Facts), len(t.Adjs)
	return nil
}

// waitApplied polls invoice until every open invoice of t's open periods
// has the model's charge lines (quantity, count, amount), adjustment lines
// and subtotal.
func (r *runner) waitApplied(ctx context.Context, t *Tenant) error {
	periods := map[string]bool{}
	for _, f := range t.Facts[t.seenFacts:] {
		periods[f.Period] = true
	}
	for _, a := range t.Adjs[t.seenAdjs:] {
		periods[a.Period] = true
	}
	deadline := time.Now().Add(r.cfg.Settle)
	for _, p := range sortedKeys(periods) {
		if t.period(p).Closed {
			continue // a correction note: no running figure
		}
		want := map[string]*ExpInvoice{}
		for _, c := range t.currencies(p, false) {
			if w := t.expectInvoice(p, c, false); len(w.Charge) > 0 || len(w.Adjustments) > 0 {
				want[c] = w
			}
		}
		for {
			got, err := r.invoices(ctx, t, p)
			if err != nil {
				return err
			}
			var diffs []string
			for _, c := range sortedKeys(want) {
				g, ok := got[c]
				if !ok {
					diffs = append(diffs, "no invoice in "+c)
					continue
				}
				for _, d := range compareLines(t, g, want[c], false) {
					diffs = append(diffs, c+": "+d)
				}
				if !g.Subtotal.Equal(want[c].Subtotal) {
					diffs = append(diffs, fmt.Sprintf("%s: subtotal %s, want %s", c, g.Subtotal, want[c].Subtotal))
				}
			}
			if len(diffs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fail("alert-settle", "%s open invoices of %s after %s: %s", t.ID, p, r.cfg.Settle, strings.Join(diffs, "; "))
			}
			// polled: invoice applies charges from its consumer; no signal reaches the test
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// decideAlerts applies to each alert of t what the facts and adjustments
// since the last point did to its figures.
func (r *runner) decideAlerts(t *Tenant) {
	fresh := map[any]bool{}
	for _, f := range t.Facts[t.seenFacts:] {
		fresh[f] = true
	}
	for _, x := range t.Adjs[t.seenAdjs:] {
		fresh[x] = true
	}
	for _, a := range t.Alerts {
		if a.Deleted && mutation != "alert-after-delete" { // a deliberately wrong model: a deleted alert is still told
			continue
		}
		touched := map[string][]any{} // period -> what touched the figure, since the last point
		for _, f := range t.Facts[t.seenFacts:] {
			if a.watches(f) {
				touched[f.Period] = append(touched[f.Period], f)
			}
		}
		for _, x := range t.Adjs[t.seenAdjs:] {
			if a.Kind == "spend" && x.Currency == a.Currency && !x.AfterClose {
				touched[x.Period] = append(touched[x.Period], x)
			}
		}
		for _, p := range sortedKeys(touched) {
			if t.period(p).Closed {
				continue
			}
			st := a.period(p)
			v, ok := t.alertFigure(a, p, nil, nil)
			reached := ok && alertReached(a.Threshold, v)
			switch {
			case st.Told == 0 && reached:
				st.Told, st.Bound = 1, v
			case st.Told > 0 && !reached:
				st.Below = true
			case st.Told > 0 && st.Below && mutation == "alert-retold-after-drop": // a deliberately wrong model: told again after a drop and a rise
				st.Told++
				st.Below = false
			case st.Told == 0 && !st.May && r.mayReach(t, a, p, touched[p], fresh):
				st.May = true
			}
		}
	}
}

// mayReach: the figure of a in p, over what invoice had applied at the
// last point and some of what touched it since (effs), reaches the
// threshold; every subset up to ten of them, more counting as reached.
func (r *runner) mayReach(t *Tenant, a *Alert, p string, effs []any, fresh map[any]bool) bool {
	if a.monotone() {
		return false // the figure now bounds every earlier one, and it is below
	}
	if len(effs) > 10 {
		r.stats.AlertMayUnbounded++
		return true
	}
	for mask := 1; mask < 1<<len(effs); mask++ {
		chosen := map[any]bool{}
		for i, e := range effs {
			if mask&(1<<i) != 0 {
				chosen[e] = true
			}
		}
		v, ok := t.alertFigure(a, p, func(f *Fact) bool { return !fresh[f] || chosen[f] },
			func(x *Adjustment) bool { return !fresh[x] || chosen[x] })
		if ok && alertReached(a.Threshold, v) {
			return true
		}
	}
	return false
}

// alertOp creates an alert (refused past maxAlerts) or deletes one.
func (r *runner) alertOp(ctx context.Context, t *Tenant) error {
	if r.cfg.Hooks == nil {
		r.note("#%d alert %s: skipped, no webhook receiver", r.step, t.ID)
		return nil
	}
	if err := r.alertPoint(ctx, t, true); err != nil {
		return err
	}
	live := t.liveAlerts()
	x := r.rng.IntN(10)
	switch {
	case len(live) > 0 && (x < 2 || (len(live) >= maxAlerts && x < 6)):
		return r.deleteAlert(ctx, t, live[r.rng.IntN(len(live))])
	case x == 9 && len(live) < len(t.Alerts):
		for _, a := range t.Alerts {
			if a.Deleted {
				return r.deleteAlert(ctx, t, a) // again: 404
			}
		}
	}
	return r.createAlert(ctx, t)
}

func (r *runner) createAlert(ctx context.Context, t *Tenant) error {
	now := instant(r.now())
	p, _ := t.target(now)
	a := &Alert{Periods: map[string]*alertPeriod{}}
	body := map[string]any{}
	var what string
	wantStatus, wantCode := 201, ""
	if len(t.liveAlerts()) >= maxAlerts {
		wantStatus, wantCode = 422, "limit_exceeded"
	}
	if r.rng.IntN(3) > 0 {
		a.Kind = "usage"
		var withFacts []string
		seen := map[string]bool{}
		for _, f := range t.Facts {
			if f.Period == p && !seen[f.Meter] {
				seen[f.Meter] = true
				withFacts = append(withFacts, f.Meter)
			}
		}
		cands := withFacts
		if len(cands) == 0 || r.rng.IntN(3) == 0 {
			cands = append(sortedKeys(t.Series), t.planMeters()...)
		}
		if len(cands) == 0 {
			cands = []string{meters[r.rng.IntN(len(meters))].Code}
		}
		// an aggregation first, so that the many sum meters do not crowd
		// out the others
		byAgg := map[string][]string{}
		for _, m := range cands {
			byAgg[aggName(m)] = append(byAgg[aggName(m)], m)
		}
		aggs := sortedKeys(byAgg)
		ms := byAgg[aggs[r.rng.IntN(len(aggs))]]
		a.Meter = ms[r.rng.IntN(len(ms))]
		v, _ := t.alertFigure(a, p, nil, nil)
		a.Threshold, what = r.usageThreshold(v, aggName(a.Meter))
		body["kind"], body["meterCode"] = "usage", a.Meter
	} else {
		a.Kind = "spend"
		cs := t.currencies(p, false)
		for _, s := range t.Series {
			cs = append(cs, s.Currency)
		}
		a.Currency = cs[r.rng.IntN(len(cs))]
		v, _ := t.alertFigure(a, p, nil, nil)
		a.Threshold, what = r.spendThreshold(v, a.Currency)
		body["kind"], body["currency"] = "spend", a.Currency
	}
	body["threshold"] = a.Threshold.String()
	if r.rng.IntN(15) == 0 { // refused as it stands, whatever the limit: nothing is written
		if a.Kind == "usage" {
			body["threshold"], what, wantStatus, wantCode = "0", "zero", 400, "invalid_threshold"
		} else {
			body["threshold"] = a.Threshold.Add(decimal.New(1, -minor(a.Currency)-1)).String()
			what, wantStatus, wantCode = "finer than the minor unit", 422, "amount_precision"
		}
	}
	ans, err := r.c.do(ctx, "invoice", "POST", t.ID, "/alerts", body, map[string]string{"Idempotency-Key": r.key("alert")})
	if err != nil {
		return err
	}
	r.note("#%d alert %s create %s %s%s threshold %v (%s; period %s) -> %d %s", r.step, t.ID, a.Kind, a.Meter, a.Currency,
		body["threshold"], what, p, ans.Status, ans.Code())
	if ans.Status != wantStatus || ans.Code() != wantCode {
		return fail("alert", "%s create %s alert %v: want %d %s, got %d %s", t.ID, a.Kind, body, wantStatus, wantCode,
			ans.Status, clip(string(ans.Body)))
	}
	if wantStatus != 201 {
		if wantCode == "limit_exceeded" {
			r.stats.AlertsAtLimit++
		} else {
			r.stats.AlertsInvalid++
		}
		return nil
	}
	var got struct {
		AlertID   string          `json:"alertId"`
		Kind      string          `json:"kind"`
		MeterCode string          `json:"meterCode"`
		Currency  string          `json:"currency"`
		Threshold decimal.Decimal `json:"threshold"`
	}
	if err := ans.decode(&got); err != nil {
		return err
	}
	if got.AlertID == "" || got.Kind != a.Kind || got.MeterCode != a.Meter || got.Currency != a.Currency || !got.Threshold.Equal(a.Threshold) {
		return fail("alert", "%s created alert %v answered %s", t.ID, body, clip(string(ans.Body)))
	}
	a.ID = got.AlertID
	t.Alerts = append(t.Alerts, a)
	r.stats.Alerts++
	r.stats.AlertsByKind[a.Kind+" "+aggOrCurrency(a)]++
	return nil
}

func aggOrCurrency(a *Alert) string {
	if a.Kind == "usage" {
		return aggName(a.Meter)
	}
	return a.Currency
}

// usageThreshold is a threshold near figure v of a meter of aggregation
// agg: v itself (reached by the next fact that does not lower it), a step
// above, twice it, or a small one (a later period reaches it).
func (r *runner) usageThreshold(v decimal.Decimal, agg string) (decimal.Decimal, string) {
	switch x := r.rng.IntN(10); {
	case x < 3 && v.IsPositive():
		return v, "the figure now"
	case x < 6:
		if agg == "count" || agg == "unique_count" {
			return v.Add(decimal.NewFromInt(int64(1 + r.rng.IntN(2)))), "a fact or two more"
		}
		return v.Add(pick(r.rng, "1", "2", "5", "0.5", "10", "20")), "a step above"
	case x < 8:
		return v.Mul(decimal.NewFromInt(2)).Add(decimal.NewFromInt(1)), "past twice the figure"
	}
	return pick(r.rng, "1", "2", "3", "0.5"), "small"
}

// spendThreshold is a threshold near running total v in currency c, in
// whole minor units above zero.
func (r *runner) spendThreshold(v decimal.Decimal, c string) (decimal.Decimal, string) {
	unit := decimal.New(1, -minor(c))
	up := v.RoundCeil(minor(c))
	if !up.IsPositive() {
		up = unit
	}
	switch x := r.rng.IntN(10); {
	case x < 3:
		return up, "the running total now, rounded up"
	case x < 6:
		return up.Add(unit.Mul(pick(r.rng, "1", "5", "100", "1000"))), "a few minor units above"
	case x < 8:
		return up.Mul(dec("1.5")).RoundCeil(minor(c)), "half as much again"
	}
	return unit.Mul(pick(r.rng, "1", "100", "1000")), "small"
}

func (r *runner) deleteAlert(ctx context.Context, t *Tenant, a *Alert) error {
	wantStatus, wantCode := 204, ""
	if a.Deleted {
		wantStatus, wantCode = 404, "not_found"
	}
	ans, err := r.c.do(ctx, "invoice", "DELETE", t.ID, "/alerts/"+a.ID, nil, nil)
	if err != nil {
		return err
	}
	r.note("#%d alert %s delete %s -> %d %s", r.step, t.ID, a, ans.Status, ans.Code())
	if ans.Status != wantStatus || ans.Code() != wantCode {
		return fail("alert", "%s delete %s: want %d %s, got %d %s", t.ID, a, wantStatus, wantCode, ans.Status, clip(string(ans.Body)))
	}
	if wantStatus == 204 {
		a.Deleted = true
		r.stats.AlertsDeleted++
	}
	return nil
}

// toThreshold sends a fact that takes a live usage alert's figure
// exactly to its threshold in the period now, when there is one, else an
// ordinary fact: the gap for a sum meter, the threshold for a max one,
// any fact when a count alert is one short, a new value when a
// unique_count one is.
func (r *runner) toThreshold(ctx context.Context, t *Tenant) error {
	now := r.now()
	at := instant(now.Add(-20 * time.Millisecond))
	if t.dueOpen(at, now) {
		at = instant(now)
	}
	p, _ := t.target(at)
	type cand struct {
		a     *Alert
		qty   decimal.Decimal
		value string // a unique_count fact's value, new in the period
	}
	var cands []cand
	for _, a := range t.liveAlerts() {
		if a.Kind != "usage" || (a.Periods[p] != nil && a.Periods[p].Told > 0) {
			continue
		}
		v, _ := t.alertFigure(a, p, nil, nil)
		gap := a.Threshold.Sub(v)
		switch agg := aggName(a.Meter); {
		case !gap.IsPositive():
		case agg == "sum":
			cands = append(cands, cand{a: a, qty: gap})
		case agg == "count" && gap.Equal(decimal.NewFromInt(1)):
			cands = append(cands, cand{a: a, qty: randomQty(r.rng)})
		case agg == "max":
			cands = append(cands, cand{a: a, qty: a.Threshold})
		case agg == "unique_count" && gap.Equal(decimal.NewFromInt(1)):
			m := meterDef(a.Meter)
			seen := map[string]bool{}
			for _, f := range t.Facts {
				if f.Period == p && f.Meter == a.Meter {
					seen[f.Props[m.ValueProp]] = true
				}
			}
			for _, v := range propertyValues[m.ValueProp] {
				if !seen[v] {
					cands = append(cands, cand{a: a, qty: randomQty(r.rng), value: v})
					break
				}
			}
		}
	}
	if len(cands) == 0 {
		r.note("#%d to-threshold %s: no usage alert a fact can take to its threshold", r.step, t.ID)
		return r.usage(ctx, t, false)
	}
	c := cands[r.rng.IntN(len(cands))]
	m := meterDef(c.a.Meter)
	t.nextEventID++
	f := &Fact{SourceEventID: fmt.Sprintf("e%d", t.nextEventID), Meter: m.Code, Qty: c.qty, At: at, Props: r.properties(m)}
	if c.value != "" {
		if f.Props == nil {
			f.Props = map[string]string{}
		}
		f.Props[m.ValueProp] = c.value
	}
	s := t.Series[m.Code]
	if s != nil {
		f.Currency = s.Currency
	} else {
		f.Currency, f.NamesCurrency = m.Currency, true
	}
	wantStatus, wantCode := r.expectUsage(t, f, s)
	r.stats.Facts++
	ans, err := r.c.do(ctx, "usage", "POST", t.ID, "/usage", f.body(), nil)
	if err != nil {
		return err
	}
	r.note("#%d usage %s %s %s %s at %s to the threshold of %s -> %d %s", r.step, t.ID, f.SourceEventID, f.Meter, f.Qty,
		f.At.Format(time.RFC3339Nano), c.a, ans.Status, ans.Code())
	if ans.Status != wantStatus || ans.Code() != wantCode {
		return fail("usage", "%s fact %s (%s %s at %s): want %d %s, got %d %s", t.ID, f.SourceEventID, f.Meter, f.Qty,
			f.At.Format(time.RFC3339Nano), wantStatus, wantCode, ans.Status, clip(string(ans.Body)))
	}
	if wantStatus != 201 {
		r.stats.Refused++
		return nil
	}
	var got usageAnswer
	if err := ans.decode(&got); err != nil {
		return err
	}
	r.accept(t, f, s, got)
	r.stats.ToThreshold++
	return r.alertPoint(ctx, t, false)
}

// afterOp decides t's alerts after an operation that may have touched
// their figures: after an adjustment in a currency a live spend alert
// watches (a credit may take a told figure below its threshold), and one
// time in two after usage that touched the figure of a live alert not
// yet told in the fact's period (whether it reaches the threshold). A
// told alert's figure rising again needs no point of its own: the next
// one sees it.
func (r *runner) afterOp(ctx context.Context, t *Tenant, k Kind) error {
	if r.cfg.Hooks == nil {
		return nil
	}
	live := t.liveAlerts()
	for _, a := range live {
		if a.Kind != "spend" {
			continue
		}
		for _, x := range t.Adjs[t.seenAdjs:] {
			if x.Currency == a.Currency && !x.AfterClose {
				return r.alertPoint(ctx, t, false)
			}
		}
	}
	if k == OpAdjust {
		return nil
	}
	for _, a := range live {
		for _, f := range t.Facts[t.seenFacts:] {
			if a.watches(f) && (a.Periods[f.Period] == nil || a.Periods[f.Period].Told == 0) {
				if r.rng.IntN(2) == 0 {
					return r.alertPoint(ctx, t, false)
				}
				return nil
			}
		}
	}
	return nil
}

// drainHooks waits until invoice has no alert.triggered intent of t left
// to deliver (pending or leased); one failed or expired is a failure.
func (r *runner) drainHooks(ctx context.Context, t *Tenant) error {
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		open, err := r.openAlertIntents(ctx, t)
		if err != nil {
			return err
		}
		if len(open) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fail("alert", "%s alert.triggered intents not delivered after %s: %s", t.ID, r.cfg.Settle, strings.Join(open, "; "))
		}
		// polled: the webhook worker delivers on its own rounds
		time.Sleep(50 * time.Millisecond)
	}
}

// openAlertIntents lists t's alert.triggered intents not yet accepted.
func (r *runner) openAlertIntents(ctx context.Context, t *Tenant) ([]string, error) {
	var open []string
	cursor := ""
	for {
		q := "/v1/operator/webhook-intents?limit=1000&tenantId=" + url.QueryEscape(t.ID)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		a, err := r.c.operator(ctx, "GET", q)
		if err != nil {
			return nil, err
		}
		if a.Status != 200 {
			return nil, fmt.Errorf("webhook intents of %s: %d %s", t.ID, a.Status, clip(string(a.Body)))
		}
		var page struct {
			Items []struct {
				WebhookID string `json:"webhookId"`
				EventType string `json:"eventType"`
				Status    string `json:"status"`
				LastError string `json:"lastError"`
			} `json:"items"`
			Next *string `json:"next"`
		}
		if err := a.decode(&page); err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			if it.EventType != "alert.triggered" || it.Status == "accepted" {
				continue
			}
			if it.Status == "failed" || it.Status == "expired" {
				return nil, fail("alert", "%s intent %s %s (%s)", t.ID, it.WebhookID, it.Status, it.LastError)
			}
			open = append(open, it.WebhookID+" "+it.Status)
		}
		if page.Next == nil || *page.Next == "" {
			return open, nil
		}
		cursor = *page.Next
	}
}

// checkAlerts decides t's alerts at a point, waits until every
// alert.triggered intent of t is delivered, and compares what the
// receiver holds with the model: every alert and period told for certain
// received exactly once (or as often as the model says), one that may
// have been told at most once, none other; each delivery's alert, period,
// kind, meter or currency and threshold as created, its value at or above
// the threshold (and, for a monotone figure told for certain, at most the
// figure at the point that made it certain).
func (r *runner) checkAlerts(ctx context.Context, t *Tenant) error {
	if r.cfg.Hooks == nil {
		return nil
	}
	if err := r.alertPoint(ctx, t, false); err != nil {
		return err
	}
	if err := r.drainHooks(ctx, t); err != nil {
		return err
	}
	got, bad := r.cfg.Hooks.received(t.ID)
	if len(bad) > 0 {
		return fail("alert", "deliveries failed the receiver's checks: %s", strings.Join(bad, "; "))
	}
	byKey := map[string][]alertDelivery{}
	for _, d := range got {
		byKey[d.WebhookID] = append(byKey[d.WebhookID], d)
	}
	var diffs []string
	predicted := map[string]bool{}
	for _, a := range t.Alerts {
		for _, p := range sortedKeys(a.Periods) {
			st := a.Periods[p]
			key := "alert_" + a.ID + "_" + p
			predicted[key] = true
			ds := byKey[key]
			now, _ := t.alertFigure(a, p, nil, nil)
			switch {
			case st.Told > 0 && len(ds) != st.Told:
				diffs = append(diffs, fmt.Sprintf("%s in %s: %d deliveries, the model predicts %d (figure %s at the point that told it, %s now)",
					a, p, len(ds), st.Told, st.Bound, now))
			case st.Told == 0 && st.May && len(ds) > 1:
				diffs = append(diffs, fmt.Sprintf("%s in %s: %d deliveries, the model predicts at most one", a, p, len(ds)))
			case st.Told == 0 && !st.May && len(ds) > 0:
				diffs = append(diffs, fmt.Sprintf("%s in %s: told (value %s), the model predicts no crossing (figure %s now)", a, p, ds[0].Data.Value, now))
			}
			for _, d := range ds {
				x := d.Data
				if x.AlertID != a.ID || x.TenantID != t.ID || x.Period != p || x.Kind != a.Kind || x.MeterCode != a.Meter ||
					x.Currency != a.Currency || !x.Threshold.Equal(a.Threshold) || x.Value.LessThan(a.Threshold) ||
					(a.monotone() && !st.May && st.Told > 0 && x.Value.GreaterThan(st.Bound)) {
					diffs = append(diffs, fmt.Sprintf("%s in %s: delivery %+v (the figure at the point that told it %s)", a, p, x, st.Bound))
				}
			}
			if st.Told > 0 && !r.alertsPredicted[key] {
				r.alertsPredicted[key] = true
				r.stats.AlertsPredicted++
			}
			if len(ds) > 0 && !r.alertsCounted[key] {
				r.alertsCounted[key] = true
				r.stats.AlertsReceived++
				if st.Told > 0 && !st.May {
					r.stats.AlertsCertain++
				} else {
					r.stats.AlertsMayTold++
				}
				if ds[0].Data.Value.Equal(a.Threshold) {
					r.stats.AlertsExact++
				}
			}
		}
	}
	for _, key := range sortedKeys(byKey) {
		if !predicted[key] {
			diffs = append(diffs, fmt.Sprintf("a delivery %s (value %s) of no alert or period the model knows", key, byKey[key][0].Data.Value))
		}
	}
	if len(diffs) > 0 {
		return fail("alert", "%s alerts: %s", t.ID, strings.Join(diffs, "; "))
	}
	return nil
}
