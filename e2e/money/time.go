package money

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Time zones the tenants choose from: east and west of UTC, whole and
// fractional hours, with and without summer time, and the extremes.
var zones = []string{"Asia/Seoul", "America/Los_Angeles", "Asia/Kolkata", "America/St_Johns", "Pacific/Kiritimati",
	"Pacific/Pago_Pago", "Europe/Berlin", "America/Sao_Paulo", "UTC"}

// graces: "" leaves gracePeriod out (the default, one hour). Each is 0 or
// longer than clearance, so a grace never runs out by the wall clock alone.
var graces = []struct {
	ISO string
	D   time.Duration
}{{"", time.Hour}, {"PT0S", 0}, {"PT45M", 45 * time.Minute}, {"PT6H", 6 * time.Hour}, {"P2D", 48 * time.Hour},
	{"P1DT2H30M", 26*time.Hour + 30*time.Minute}}

// settingsLead is billing's SettingsLead (decision 0014): a change applies
// from the period after the one in progress this far from now.
const settingsLead = 10 * time.Minute

// clearance: after every operation no period of any tenant ends or closes
// within this much of the model's now, so the wall clock, which keeps
// running between two moves of the clock, never carries a period into grace
// or a close without the model moving it there. It must exceed
// settingsLead (a settings change is predicted from now+settingsLead) and
// any stretch of operations between two looks (each operation looks).
const clearance = 20 * time.Minute

func (r *runner) driver() Driver {
	d, _ := r.cfg.Clock.(Driver)
	return d
}

// ---- settings ----

// settings sets the tenant's time zone and grace (PUT .../settings, which
// replaces every setting): mostly with its tax rates as they are, now and
// then with new ones or none; or sends a refused one.
func (r *runner) settings(ctx context.Context, t *Tenant) error {
	want := t.latestSetting()
	if err := r.randomZone(&want); err != nil {
		return err
	}
	switch r.rng.IntN(10) {
	case 0, 1:
		want.Taxes = r.taxRates()
	case 2:
		want.Taxes = nil // left out: dropped
	}
	body := settingsBody(want)
	wantStatus, wantCode := 200, ""
	switch x := r.rng.IntN(100); {
	case x < 6:
		body["timeZone"], wantStatus, wantCode = "Mars/Olympus_Mons", 400, "invalid_time_zone"
	case x < 9:
		body["timeZone"], wantStatus, wantCode = "Local", 400, "invalid_time_zone"
	case x < 13:
		body["gracePeriod"], wantStatus, wantCode = "P1M", 400, "invalid_grace_period"
	case x < 17:
		body["gracePeriod"], wantStatus, wantCode = "P7DT1S", 422, "grace_period_out_of_range"
	case x < 22:
		delete(body, "timeZone") // the default zone
		want.Zone = time.UTC
	}
	return r.putSettings(ctx, t, "settings", body, want, wantStatus, wantCode)
}

// randomZone gives s one of the zones and graces.
func (r *runner) randomZone(s *Setting) error {
	loc, err := time.LoadLocation(zones[r.rng.IntN(len(zones))])
	if err != nil {
		return err
	}
	s.Zone, s.Grace = loc, graces[r.rng.IntN(len(graces))].D
	return nil
}

// settingsBody is the settings request for s: every field, for the
// request replaces them all (a grace of an hour and no tax rates are
// left out, their defaults).
func settingsBody(s Setting) map[string]any {
	body := map[string]any{"timeZone": s.Zone.String()}
	for _, g := range graces {
		if g.D == s.Grace && g.ISO != "" {
			body["gracePeriod"] = g.ISO
		}
	}
	if len(s.Taxes) > 0 {
		body["taxRates"] = taxRatesBody(s.Taxes)
	}
	return body
}

// putSettings sends body, the settings request for want or (wantStatus
// 400 or 422) a refused variant of it, and records want from the period
// billing says it applies from. A change applies from the period after the
// one in progress settingsLead from now; the model sends one only when no
// earlier change is still pending (or it would replace it: the same
// period).
func (r *runner) putSettings(ctx context.Context, t *Tenant, what string, body map[string]any, want Setting, wantStatus int, wantCode string) error {
	now := r.now()
	from := nextPeriod(t.periodOf(now.Add(settingsLead)))
	if wantStatus == 200 {
		if n := len(t.Settings); n > 0 && t.Settings[n-1].From > t.periodOf(now) && t.Settings[n-1].From != from {
			r.note("#%d %s %s: skipped, a change from %s is pending", r.step, what, t.ID, t.Settings[n-1].From)
			return nil
		}
	}
	a, err := r.c.do(ctx, "billing", "PUT", t.ID, "/settings", body, map[string]string{"Idempotency-Key": r.key("settings")})
	if err != nil {
		return err
	}
	r.note("#%d %s %s %v -> %d %s %s", r.step, what, t.ID, body, a.Status, a.Code(), clip(string(a.Body)))
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("settings", "%s %s %v: want %d %s, got %d %s", t.ID, what, body, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus != 200 {
		return nil
	}
	var got struct {
		TimeZone      string       `json:"timeZone"`
		TaxRates      []taxRateDoc `json:"taxRates"`
		EffectiveFrom string       `json:"effectiveFrom"`
	}
	if err := a.decode(&got); err != nil {
		return err
	}
	if got.TimeZone != want.Zone.String() || got.EffectiveFrom != from || !sameTaxRates(got.TaxRates, want.Taxes) {
		return fail("settings", "%s %s %v at %s: want zone %s, tax rates %v, effective from %s, got %s", t.ID, what, body,
			now.Format(time.RFC3339Nano), want.Zone, taxRatesBody(want.Taxes), from, clip(string(a.Body)))
	}
	want.From = from
	if n := len(t.Settings); n > 0 && t.Settings[n-1].From == from {
		t.Settings[n-1] = want // a second change before the period begins replaces the first
	} else {
		t.Settings = append(t.Settings, want)
	}
	r.stats.Settings++
	return nil
}

// ---- the clock ----

// boundaries are the ends and closes of t's periods in (from, to].
func (t *Tenant) boundaries(from, to time.Time) []time.Time {
	var out []time.Time
	for p := prevPeriod(t.periodOf(from)); !t.start(p).After(to); p = nextPeriod(p) {
		for _, b := range []time.Time{t.end(p), t.closesAt(p)} {
			if b.After(from) && !b.After(to) {
				out = append(out, b)
			}
		}
	}
	return out
}

// nextBoundary of any tenant after from (zero: none within a year).
func (r *runner) nextBoundary(from time.Time) time.Time {
	var best time.Time
	for _, t := range r.tenants {
		for _, b := range t.boundaries(from, from.Add(400*24*time.Hour)) {
			if best.IsZero() || b.Before(best) {
				best = b
			}
		}
	}
	return best
}

// keepClear moves the clock past any end or close within clearance of now
// (see clearance); without a controllable clock it does nothing.
func (r *runner) keepClear(ctx context.Context) error {
	if r.driver() == nil {
		return nil
	}
	now := r.now()
	if b := r.nextBoundary(now); !b.IsZero() && !b.After(now.Add(clearance)) {
		r.note("#%d clock: %s ends or closes within %s: move past it", r.step, b.Format(time.RFC3339Nano), clearance)
		return r.advanceTo(ctx, b.Add(time.Millisecond))
	}
	return nil
}

// advance moves the clock to just after the next period end or close of
// any tenant (into a grace, or past a close), or to a while before it
// (usage then occurs late in the period), or a little further.
func (r *runner) advance(ctx context.Context) error {
	if r.driver() == nil {
		r.note("#%d advance: skipped, the clock is not controllable", r.step)
		return nil
	}
	now := r.now()
	b := r.nextBoundary(now)
	if b.IsZero() {
		r.note("#%d advance: skipped, no tenant", r.step)
		return nil
	}
	var to time.Time
	switch x := r.rng.IntN(10); {
	case x < 6: // just after it
		to = b.Add(time.Duration(1+r.rng.Int64N(int64(2*time.Minute))) + 0)
	case x < 8: // a while before it (at least clearance)
		to = b.Add(-clearance - time.Duration(r.rng.Int64N(int64(3*time.Hour))))
		if !to.After(now) {
			to = b.Add(time.Second)
		}
	default: // a day or two further
		to = b.Add(time.Duration(r.rng.Int64N(int64(48 * time.Hour))))
	}
	return r.advanceTo(ctx, to)
}

// advanceTo moves the clock to `to` (later, if an end or close lies within
// clearance of it), after settling every tenant that has a period the move
// makes due (every accepted fact rated before the scheduler closes it);
// then waits until the scheduler has closed each due period with charges
// (checking its invoices), and until invoice reads as draft every open
// invoice of a period the move carried into grace.
func (r *runner) advanceTo(ctx context.Context, to time.Time) error {
	for {
		b := r.nextBoundary(to)
		if b.IsZero() || b.After(to.Add(clearance)) {
			break
		}
		to = b.Add(time.Millisecond + time.Duration(r.rng.Int64N(int64(time.Second))))
	}
	from := r.now()
	type due struct {
		t *Tenant
		p string
	}
	var closes, graces []due
	for _, t := range r.tenants {
		for _, p := range t.openCharged(to) {
			switch {
			case !t.closesAt(p).After(to):
				closes = append(closes, due{t, p})
			case !t.end(p).After(to) && t.end(p).After(from):
				graces = append(graces, due{t, p})
			}
		}
	}
	for _, d := range closes {
		if err := r.settleIfDirty(ctx, d.t); err != nil {
			return err
		}
	}
	// Alerts are decided, and told, before the move: a close ends a
	// period's running figures, and an intent expires on the clock.
	for _, t := range r.tenants {
		if len(t.Alerts) == 0 {
			continue
		}
		if err := r.alertPoint(ctx, t, false); err != nil {
			return err
		}
		if err := r.drainHooks(ctx, t); err != nil {
			return err
		}
	}
	if err := r.driver().Advance(to); err != nil {
		return err
	}
	r.stats.Advances++
	var desc []string
	for _, d := range closes {
		desc = append(desc, d.t.ID+" "+d.p+" closes")
	}
	for _, d := range graces {
		desc = append(desc, d.t.ID+" "+d.p+" in grace")
	}
	r.note("#%d clock %s -> %s (+%s) [%s]", r.step, from.UTC().Format(time.RFC3339), r.now().UTC().Format(time.RFC3339Nano),
		to.Sub(from).Round(time.Second), strings.Join(desc, "; "))
	sort.SliceStable(closes, func(i, j int) bool { return closes[i].p < closes[j].p })
	for _, d := range closes {
		if err := r.awaitAutoClose(ctx, d.t, d.p); err != nil {
			return err
		}
	}
	for _, d := range graces {
		if err := r.checkDrafts(ctx, d.t, d.p); err != nil {
			return err
		}
	}
	return nil
}

// awaitAutoClose waits until billing reads period p closed (by the
// scheduler at its end plus grace), records the close in the model and
// compares the issued invoices.
func (r *runner) awaitAutoClose(ctx context.Context, t *Tenant, p string) error {
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		a, err := r.c.do(ctx, "billing", "GET", t.ID, "/periods/"+p, nil, nil)
		if err != nil {
			return err
		}
		var got struct {
			Status string `json:"status"`
		}
		if a.Status != 200 {
			return fail("autoclose", "%s period %s: %d %s", t.ID, p, a.Status, clip(string(a.Body)))
		}
		if err := a.decode(&got); err != nil {
			return err
		}
		if got.Status == "closed" {
			break
		}
		if time.Now().After(deadline) {
			return fail("autoclose", "%s period %s (closes at %s, now %s): still %s after %s", t.ID, p,
				t.closesAt(p).Format(time.RFC3339Nano), r.now().Format(time.RFC3339Nano), got.Status, r.cfg.Settle)
		}
		// polled: billing's scheduler closes the period on its own pass
		time.Sleep(100 * time.Millisecond)
	}
	r.markClosed(t, p)
	r.stats.AutoCloses++
	return r.checkInvoices(ctx, t, p)
}

// markClosed records a close: its invoices get the tenant's next numbers
// and draw from its credit grants (issues in the order of the model's closes).
func (r *runner) markClosed(t *Tenant, p string) {
	per := t.period(p)
	per.Fees = t.fees(p) // as billing's close computes them
	per.Closed = true
	for _, c := range t.currencies(p, true) {
		per.Numbers[c] = t.NextNumber // the set of numbers is checked, not which currency got which
		t.NextNumber++
	}
	t.drawCredits(p)
}

// dueOpen: at's fact would be rated into an open period whose close is
// due (it has no charge yet, so the scheduler left it open): the scheduler
// would close it at its next pass, racing the rating of any other fact of
// it. The model does not send such facts.
func (t *Tenant) dueOpen(at time.Time, now time.Time) bool {
	p, _ := t.target(at)
	return !t.closesAt(p).After(now)
}

// checkDrafts waits until invoice reads every invoice of period p (ended,
// in grace) as draft and compares it with the model: the charge lines so
// far, the adjustments, the subtotal; no number or total yet.
func (r *runner) checkDrafts(ctx context.Context, t *Tenant, p string) error {
	if err := r.settleIfDirty(ctx, t); err != nil {
		return err
	}
	want := map[string]*ExpInvoice{}
	for _, c := range t.currencies(p, false) {
		if w := t.expectInvoice(p, c, false); len(w.Charge) > 0 || len(w.Adjustments) > 0 { // fees alone open no invoice before the close
			want[c] = w
		}
	}
	// invoice follows billing's events: poll until it agrees or Settle ends
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		got, err := r.invoices(ctx, t, p)
		if err != nil {
			return err
		}
		diffs := draftDiffs(t, p, got, want)
		if len(diffs) == 0 {
			r.stats.Drafts += len(want)
			return nil
		}
		if time.Now().After(deadline) {
			return fail("draft", "%s draft invoices of %s after %s (period ended %s, closes %s): %s", t.ID, p, r.cfg.Settle,
				t.end(p).Format(time.RFC3339Nano), t.closesAt(p).Format(time.RFC3339Nano), strings.Join(diffs, "; "))
		}
		// polled: invoice shows the draft once it applied the period's charges
		time.Sleep(100 * time.Millisecond)
	}
}

func draftDiffs(t *Tenant, p string, got map[string]invoiceDoc, want map[string]*ExpInvoice) []string {
	var diffs []string
	for _, c := range sortedKeys(got) {
		if want[c] == nil {
			diffs = append(diffs, "an invoice in "+c+" the model does not expect")
		}
	}
	for _, c := range sortedKeys(want) {
		w, g := want[c], got[c]
		if g.Status != "draft" {
			diffs = append(diffs, fmt.Sprintf("%s: status %q, want draft", c, g.Status))
			continue
		}
		if g.Number != nil || g.Total != nil || g.CreditsApplied != nil || g.AmountDue != nil {
			diffs = append(diffs, fmt.Sprintf("%s: number %v total %v creditsApplied %v amountDue %v, want none while draft", c,
				g.Number, g.Total, orNil(g.CreditsApplied), orNil(g.AmountDue)))
		}
		for _, d := range compareLines(t, g, w, false) {
			diffs = append(diffs, c+": "+d)
		}
		if !g.Subtotal.Equal(w.Subtotal) {
			diffs = append(diffs, fmt.Sprintf("%s: subtotal %s, want %s", c, g.Subtotal, w.Subtotal))
		}
	}
	return diffs
}

// checkPeriod compares billing's status and closesAt of open period p with
// the model's calendar: grace from its end, open before; closesAt its end
// plus its grace, to the microsecond.
func checkPeriod(t *Tenant, p string, now time.Time, status string, closesAt *time.Time) []string {
	want := "open"
	if !now.Before(t.end(p)) {
		want = "grace"
	}
	var diffs []string
	if status != want {
		diffs = append(diffs, fmt.Sprintf("status %s, want %s (ends %s in %s, now %s)", status, want,
			t.end(p).Format(time.RFC3339Nano), t.setting(p).Zone, now.Format(time.RFC3339Nano)))
	}
	if closesAt == nil || !closesAt.Equal(t.closesAt(p)) {
		diffs = append(diffs, fmt.Sprintf("closesAt %v, want %s (%s grace %s)", closesAt, t.closesAt(p).Format(time.RFC3339Nano),
			t.setting(p).Zone, t.setting(p).Grace))
	}
	return diffs
}
