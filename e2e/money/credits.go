package money

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Grant is one of a tenant's prepaid credit grants (DESIGN.md section 3a,
// invoice's OpenAPI document): an amount of one currency in whole minor
// units that the tenant's invoices of that currency draw at issue, from
// EffectiveAt until ExpiresAt (nil: until used). Balance is what the
// model's issues have left of it.
type Grant struct {
	Key         string         // its Idempotency-Key
	Body        map[string]any // the request, for a replay
	ID          string         // grantId, as invoice answered
	Seq         int            // creation order among the tenant's grants
	Currency    string
	Amount      decimal.Decimal
	Balance     decimal.Decimal
	EffectiveAt time.Time
	ExpiresAt   *time.Time
	Priority    int
	Reason      string
}

// maxLiveGrants is invoice's INVOICE_MAX_CREDIT_GRANTS (its default): a
// tenant may have at most this many grants with a balance that have not
// expired (else 422 limit_exceeded).
const maxLiveGrants = 100

// grantActor is the actor invoice records on a grant: the subject of the
// test's tenant tokens (client.token).
const grantActor = "dev-tenant"

// status of g at now: expired once now reaches its expiry (what was left
// is void), used with nothing left, pending before its effectiveAt, else
// active.
func (g *Grant) status(now time.Time) string {
	switch {
	case g.ExpiresAt != nil && !now.Before(*g.ExpiresAt):
		return "expired"
	case !g.Balance.IsPositive():
		return "used"
	case now.Before(g.EffectiveAt):
		return "pending"
	}
	return "active"
}

// inEffect: an invoice of a period ending at end may draw g (its balance
// permitting): in effect at the period's end, not at its issue.
func (g *Grant) inEffect(end time.Time) bool {
	return !g.EffectiveAt.After(end) && (g.ExpiresAt == nil || g.ExpiresAt.After(end))
}

func (g *Grant) String() string {
	exp := "none"
	if g.ExpiresAt != nil {
		exp = g.ExpiresAt.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s (priority %d, effective %s, expires %s, %s of %s %s left)", g.ID, g.Priority,
		g.EffectiveAt.Format(time.RFC3339Nano), exp, g.Balance, g.Amount, g.Currency)
}

// drawOrder: lowest priority first, then the earliest expiry (none last),
// then the oldest.
func drawOrder(a, b *Grant) bool {
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	if (a.ExpiresAt == nil) != (b.ExpiresAt == nil) {
		return a.ExpiresAt != nil
	}
	if a.ExpiresAt != nil && !a.ExpiresAt.Equal(*b.ExpiresAt) {
		return a.ExpiresAt.Before(*b.ExpiresAt)
	}
	return a.Seq < b.Seq
}

// CreditLine is what one issue drew from one grant: a credit_applied line
// of amount -Drawn.
type CreditLine struct {
	GrantID string
	Drawn   decimal.Decimal // above zero
}

// drawCredits is the issue of period p's invoices (at its close, in the
// order the model closes periods): each draws from the tenant's grants of
// its currency in effect at the period's end with a balance, in draw
// order, from each as much as its total still owes; nothing when the
// total is not above zero. It records the draws on the period and takes
// them off the grants' balances.
func (t *Tenant) drawCredits(p string) {
	per := t.period(p)
	per.Credits, per.CreditWhy = map[string][]CreditLine{}, map[string]string{}
	end := t.end(p)
	for _, c := range t.currencies(p, true) {
		inv := t.expectInvoice(p, c, true)
		owed := inv.Total
		if mutation == "credits-before-tax" { // a deliberately wrong model: credits against the rounded subtotal
			owed = inv.Subtotal.Add(inv.Rounding)
		}
		var in []*Grant
		for _, g := range t.Grants {
			if g.Currency == c && g.Balance.IsPositive() && g.inEffect(end) {
				in = append(in, g)
			}
		}
		if len(in) == 0 {
			continue
		}
		sort.SliceStable(in, func(i, j int) bool { return drawOrder(in[i], in[j]) })
		var why []string
		for _, g := range in {
			why = append(why, g.String())
		}
		per.CreditWhy[c] = fmt.Sprintf("total %s; grants in effect at the period's end %s, in draw order: %s", inv.Total,
			end.Format(time.RFC3339Nano), strings.Join(why, ", "))
		for _, g := range in {
			if !owed.IsPositive() {
				break
			}
			d := decimal.Min(owed, g.Balance)
			per.Credits[c] = append(per.Credits[c], CreditLine{GrantID: g.ID, Drawn: d})
			owed = owed.Sub(d)
			if mutation != "grant-drawn-twice" { // a deliberately wrong model: the balance stays, a later invoice draws it again
				g.Balance = g.Balance.Sub(d)
			}
		}
	}
}

// liveGrants are the tenant's grants with a balance that have not expired
// at now (in effect or pending): what invoice's limit counts.
func (t *Tenant) liveGrants(now time.Time) int {
	n := 0
	for _, g := range t.Grants {
		if g.Balance.IsPositive() && (g.ExpiresAt == nil || g.ExpiresAt.After(now)) {
			n++
		}
	}
	return n
}

// billedCurrencies are the currencies t is billed in: its prices', its
// facts' and its plans'.
func (t *Tenant) billedCurrencies() []string {
	set := map[string]bool{}
	for _, s := range t.Series {
		set[s.Currency] = true
	}
	for _, f := range t.Facts {
		if f.Currency != "" {
			set[f.Currency] = true
		}
	}
	for _, s := range t.Subs {
		if p := t.plans[s.Plan]; p != nil {
			set[p.Currency] = true
		}
	}
	return sortedKeys(set)
}

// typicalTotal is what an invoice of t in c comes to, to size a grant: the
// larger of its last issued invoice's total and the current period's
// figure so far (with its fees); a default when it has neither.
func (t *Tenant) typicalTotal(c string, now time.Time) decimal.Decimal {
	ref := decimal.Zero
	for _, name := range sortedKeys(t.Periods) {
		if t.Periods[name].Closed && containsString(t.currencies(name, false), c) {
			ref = t.expectInvoice(name, c, true).Total
		}
	}
	p, _ := t.target(now)
	sum := t.adjusted(p, c, nil)
	for _, l := range t.lines(p, c, nil) {
		sum = sum.Add(l.Amount)
	}
	for _, f := range t.fees(p)[c] {
		sum = sum.Add(f.Amount)
	}
	ref = decimal.Max(ref, sum)
	if !ref.IsPositive() {
		ref = map[string]decimal.Decimal{"JPY": dec("3000"), "KRW": dec("30000"), "BHD": dec("10")}[c]
		if ref.IsZero() {
			ref = dec("25")
		}
	}
	return ref
}

func containsString(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// ---- the grant operation ----

// grantAnswer is a credit grant as invoice answers it.
type grantAnswer struct {
	GrantID     string          `json:"grantId"`
	TenantID    string          `json:"tenantId"`
	Currency    string          `json:"currency"`
	Amount      decimal.Decimal `json:"amount"`
	Balance     decimal.Decimal `json:"balance"`
	Status      string          `json:"status"`
	EffectiveAt time.Time       `json:"effectiveAt"`
	ExpiresAt   *time.Time      `json:"expiresAt"`
	Priority    int             `json:"priority"`
	Reason      string          `json:"reason"`
	Actor       string          `json:"actor"`
	CreatedAt   time.Time       `json:"createdAt"`
}

// grant gives the tenant a prepaid credit (POST .../credit-grants): mostly
// in a currency it is billed in, of 10%-150% of a typical invoice of it;
// effective now, at (or a microsecond after) the current period's end, or
// later in the next period; a third with an expiry — before the period's
// end, exactly at it, a microsecond after it, in the grace or the next
// period; priorities 0-3 mostly. Now and then it replays an earlier grant
// or sends one invoice must refuse.
func (r *runner) grant(ctx context.Context, t *Tenant) error {
	x := r.rng.IntN(100)
	if x < 7 && len(t.Grants) > 0 {
		return r.grantReplay(ctx, t)
	}
	now := instant(r.now())
	var c string
	if cs := t.billedCurrencies(); len(cs) > 0 && r.rng.IntN(10) > 0 {
		c = cs[r.rng.IntN(len(cs))]
	} else {
		c = pickString(r.rng, sortedKeys(minorUnits)) // one it may never be billed in
	}
	unit := decimal.New(1, -minor(c))
	amount := floorMinor(t.typicalTotal(c, now).Mul(decimal.New(int64(10+r.rng.IntN(141)), -2)), c)
	if amount.LessThan(unit) {
		amount = unit
	}
	g := &Grant{Currency: c, Amount: amount, Balance: amount, EffectiveAt: now, Reason: fmt.Sprintf("money test grant %d", len(t.Grants)+1)}
	body := map[string]any{"currency": c, "amount": amount.String(), "reason": g.Reason}
	var how []string
	end := t.end(t.periodOf(now)) // the end of the period in progress
	switch y := r.rng.IntN(100); {
	case y < 55: // now: effectiveAt left out
		how = append(how, "effective now")
	case y < 63:
		g.EffectiveAt = instant(now.Add(-time.Duration(1 + r.rng.Int64N(int64(6*time.Hour)))))
		how = append(how, "effective a while ago")
	case y < 73: // exactly at the period's end: its invoice draws it
		g.EffectiveAt = end
		how = append(how, "effective at the period's end")
	case y < 80: // a microsecond after: the next period's does
		g.EffectiveAt = end.Add(time.Microsecond)
		how = append(how, "effective a microsecond after the period's end")
	default: // in the next period
		g.EffectiveAt = instant(end.Add(time.Duration(1 + r.rng.Int64N(int64(10*24*time.Hour)))))
		how = append(how, "effective in the next period")
	}
	if !g.EffectiveAt.Equal(now) {
		body["effectiveAt"] = g.EffectiveAt.Format(time.RFC3339Nano)
	}
	if r.rng.IntN(3) == 0 {
		var exp time.Time
		switch z := r.rng.IntN(100); {
		case z < 20 && end.Sub(now) > 2*time.Minute: // before the period's end: never drawn by it
			exp = instant(now.Add(time.Minute + time.Duration(r.rng.Int64N(int64(end.Sub(now)-time.Minute)))))
			how = append(how, "expiring before the period's end")
		case z < 35: // exactly at its end: its invoice does not draw it
			exp = end
			how = append(how, "expiring at the period's end")
		case z < 50: // a microsecond after: its invoice does
			exp = end.Add(time.Microsecond)
			how = append(how, "expiring a microsecond after the period's end")
		case z < 75: // within a day of its end: in its grace, before the next close
			exp = instant(end.Add(time.Duration(1 + r.rng.Int64N(int64(24*time.Hour)))))
			how = append(how, "expiring within a day of the period's end")
		default: // in the next period or the one after
			exp = instant(end.Add(time.Duration(1 + r.rng.Int64N(int64(50*24*time.Hour)))))
			how = append(how, "expiring in a later period")
		}
		if !exp.After(g.EffectiveAt) {
			exp = instant(g.EffectiveAt.Add(time.Duration(1 + r.rng.Int64N(int64(40*24*time.Hour)))))
			how[len(how)-1] = "expiring after its effectiveAt"
		}
		g.ExpiresAt = &exp
		body["expiresAt"] = exp.Format(time.RFC3339Nano)
	}
	switch y := r.rng.IntN(100); {
	case y < 15: // left out: 0
	case y < 90:
		g.Priority = r.rng.IntN(4)
		body["priority"] = g.Priority
	default:
		g.Priority = pickInt(r.rng, 4, 17, 500, 1000)
		body["priority"] = g.Priority
	}
	if body["priority"] != nil {
		how = append(how, fmt.Sprintf("priority %d", g.Priority))
	}
	wantStatus, wantCode := 201, ""
	if t.liveGrants(now) >= maxLiveGrants {
		wantStatus, wantCode = 422, "limit_exceeded"
	}
	if r.rng.IntN(100) < 8 {
		var what string
		body, wantStatus, wantCode, what = r.invalidGrant(body, g, now)
		how = append(how, what)
	}
	return r.sendGrant(ctx, t, g, body, strings.Join(how, ", "), wantStatus, wantCode)
}

func pickInt(rng *rand.Rand, xs ...int) int { return xs[rng.IntN(len(xs))] }

// invalidGrant is body with one problem invoice must refuse (its OpenAPI
// document), the answer it must give and what the problem is.
func (r *runner) invalidGrant(body map[string]any, g *Grant, now time.Time) (map[string]any, int, string, string) {
	bad := map[string]any{}
	for k, v := range body {
		bad[k] = v
	}
	switch r.rng.IntN(5) {
	case 0:
		bad["amount"] = g.Amount.Add(decimal.New(5, -minor(g.Currency)-1)).String()
		return bad, 422, "amount_precision", "finer than the minor unit"
	case 1:
		bad["amount"] = pickString(r.rng, []string{"0", "-1", g.Amount.Neg().String()})
		return bad, 400, "invalid_amount", "not above zero"
	case 2:
		bad["expiresAt"] = g.EffectiveAt.Format(time.RFC3339Nano)
		return bad, 422, "invalid_expiry", "expiring at its effectiveAt"
	case 3:
		bad["effectiveAt"] = now.Add(-48 * time.Hour).Format(time.RFC3339Nano)
		bad["expiresAt"] = now.Add(-time.Hour).Format(time.RFC3339Nano)
		return bad, 422, "invalid_expiry", "expired an hour ago"
	default:
		bad["priority"] = pickInt(r.rng, -1, 1001)
		return bad, 400, "invalid_priority", fmt.Sprintf("priority %v", bad["priority"])
	}
}

// sendGrant posts body (the request for g, or a refused variant of it),
// checks invoice's answer and records an accepted grant.
func (r *runner) sendGrant(ctx context.Context, t *Tenant, g *Grant, body map[string]any, how string, wantStatus int, wantCode string) error {
	g.Key, g.Body = r.key("grant"), body
	before := r.now()
	a, err := r.c.do(ctx, "invoice", "POST", t.ID, "/credit-grants", body, map[string]string{"Idempotency-Key": g.Key})
	if err != nil {
		return err
	}
	after := r.now()
	r.note("#%d grant %s %s %s (%s) -> %d %s", r.step, t.ID, body["amount"], g.Currency, how, a.Status, a.Code())
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("grant", "%s grant %v (%s): want %d %s, got %d %s", t.ID, body, how, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	if wantStatus != 201 {
		r.stats.GrantsRefused++
		return nil
	}
	var got grantAnswer
	if err := a.decode(&got); err != nil {
		return err
	}
	if _, ok := body["effectiveAt"]; !ok { // now, as invoice read its clock
		if got.EffectiveAt.Before(instant(before)) || got.EffectiveAt.After(after) {
			return fail("grant", "%s grant effective now: effectiveAt %s, want between %s and %s", t.ID,
				got.EffectiveAt.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
		}
		if !got.EffectiveAt.Equal(instant(got.EffectiveAt)) { // its list shows it to the microsecond
			r.stats.GrantsFinerThanMicros++
			got.EffectiveAt = instant(got.EffectiveAt)
		}
		g.EffectiveAt = got.EffectiveAt
	}
	g.ID, g.Seq = got.GrantID, len(t.Grants)
	var diffs []string
	if got.GrantID == "" || got.TenantID != t.ID || got.Currency != g.Currency || !got.Amount.Equal(g.Amount) || !got.Balance.Equal(g.Amount) {
		diffs = append(diffs, fmt.Sprintf("grantId %q tenant %s currency %s amount %s balance %s, want a grant id, %s %s %s balance %s",
			got.GrantID, got.TenantID, got.Currency, got.Amount, got.Balance, t.ID, g.Currency, g.Amount, g.Amount))
	}
	diffs = append(diffs, grantDiffs(g, got, before, after)...)
	if got.Actor != grantActor || got.CreatedAt.Before(instant(before)) || got.CreatedAt.After(after) {
		diffs = append(diffs, fmt.Sprintf("actor %q createdAt %s, want %q between %s and %s", got.Actor,
			got.CreatedAt.Format(time.RFC3339Nano), grantActor, before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano)))
	}
	if len(diffs) > 0 {
		return fail("grant", "%s grant %v: %s", t.ID, body, strings.Join(diffs, "; "))
	}
	t.Grants = append(t.Grants, g)
	r.stats.Grants++
	return nil
}

// grantDiffs compares what invoice says of grant g (read between before
// and after) with the model: balance, status, effectiveAt, expiresAt,
// priority, reason. A status may be the one at before or at after.
func grantDiffs(g *Grant, got grantAnswer, before, after time.Time) []string {
	var diffs []string
	if !got.Balance.Equal(g.Balance) {
		diffs = append(diffs, fmt.Sprintf("balance %s, want %s", got.Balance, g.Balance))
	}
	if s1, s2 := g.status(before), g.status(after); got.Status != s1 && got.Status != s2 {
		want := s1
		if s2 != s1 {
			want += " or " + s2
		}
		diffs = append(diffs, fmt.Sprintf("status %s at %s, want %s", got.Status, before.Format(time.RFC3339Nano), want))
	}
	if !got.EffectiveAt.Equal(g.EffectiveAt) {
		diffs = append(diffs, fmt.Sprintf("effectiveAt %s, want %s", got.EffectiveAt.Format(time.RFC3339Nano), g.EffectiveAt.Format(time.RFC3339Nano)))
	}
	if (got.ExpiresAt == nil) != (g.ExpiresAt == nil) || (got.ExpiresAt != nil && !got.ExpiresAt.Equal(*g.ExpiresAt)) {
		diffs = append(diffs, fmt.Sprintf("expiresAt %s, want %s", timeOrNone(got.ExpiresAt), timeOrNone(g.ExpiresAt)))
	}
	if got.Priority != g.Priority || got.Reason != g.Reason {
		diffs = append(diffs, fmt.Sprintf("priority %d reason %q, want %d %q", got.Priority, got.Reason, g.Priority, g.Reason))
	}
	return diffs
}

func timeOrNone(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.Format(time.RFC3339Nano)
}

// grantReplay sends an earlier grant's request again with its key: the
// first answer, replayed; or (one time in four) another request with the
// same key, refused.
func (r *runner) grantReplay(ctx context.Context, t *Tenant) error {
	g := t.Grants[r.rng.IntN(len(t.Grants))]
	body, wantStatus, wantCode, what := g.Body, 201, "", "replay"
	if r.rng.IntN(4) == 0 {
		body = map[string]any{}
		for k, v := range g.Body {
			body[k] = v
		}
		body["reason"] = "another reason"
		wantStatus, wantCode, what = 422, "idempotency_key_reused", "key reused"
	}
	a, err := r.c.do(ctx, "invoice", "POST", t.ID, "/credit-grants", body, map[string]string{"Idempotency-Key": g.Key})
	if err != nil {
		return err
	}
	r.note("#%d grant-replay %s %s of %s -> %d %s", r.step, t.ID, what, g.ID, a.Status, a.Code())
	if a.Status != wantStatus || a.Code() != wantCode {
		return fail("grant", "%s %s of grant %s: want %d %s, got %d %s", t.ID, what, g.ID, wantStatus, wantCode, a.Status, clip(string(a.Body)))
	}
	r.stats.GrantReplays++
	if wantStatus != 201 {
		return nil
	}
	var got grantAnswer
	if err := a.decode(&got); err != nil {
		return err
	}
	if got.GrantID != g.ID || !got.Amount.Equal(g.Amount) || a.Header.Get("Idempotent-Replayed") != "true" {
		return fail("grant", "%s replay of grant %s: want it (%s %s) replayed, got %s %s (Idempotent-Replayed %q)", t.ID, g.ID, g.Amount,
			g.Currency, got.GrantID, got.Amount, a.Header.Get("Idempotent-Replayed"))
	}
	return nil
}

// ---- comparisons ----

// checkGrants compares invoice's list of the tenant's grants (in pages,
// now and then small ones) with the model: the same grants in creation
// order, each with the model's balance and status.
func (r *runner) checkGrants(ctx context.Context, t *Tenant) error {
	limit := 1000
	if r.rng.IntN(4) == 0 {
		limit = 1 + r.rng.IntN(4)
	}
	before := r.now()
	var got []grantAnswer
	cursor := ""
	for {
		q := fmt.Sprintf("/credit-grants?limit=%d", limit)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		a, err := r.c.do(ctx, "invoice", "GET", t.ID, q, nil, nil)
		if err != nil {
			return err
		}
		if a.Status != 200 {
			return fail("credit", "%s credit grants: %d %s", t.ID, a.Status, clip(string(a.Body)))
		}
		var page struct {
			Grants []grantAnswer `json:"grants"`
			Next   string        `json:"next"`
		}
		if err := a.decode(&page); err != nil {
			return err
		}
		got = append(got, page.Grants...)
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	after := r.now()
	r.stats.GrantLists++
	var diffs []string
	for i, g := range t.Grants {
		if i >= len(got) {
			diffs = append(diffs, fmt.Sprintf("no grant %s (#%d)", g.ID, i+1))
			continue
		}
		if got[i].GrantID != g.ID {
			diffs = append(diffs, fmt.Sprintf("#%d is grant %s, want %s", i+1, got[i].GrantID, g.ID))
			continue
		}
		for _, d := range grantDiffs(g, got[i], before, after) {
			diffs = append(diffs, fmt.Sprintf("grant %s (%s %s): %s", g.ID, g.Amount, g.Currency, d))
		}
	}
	for _, x := range got[min(len(got), len(t.Grants)):] {
		diffs = append(diffs, fmt.Sprintf("grant %s (%s %s) the model does not have", x.GrantID, x.Amount, x.Currency))
	}
	if len(diffs) > 0 {
		return fail("credit", "%s credit grants (listed by %d): %s", t.ID, limit, strings.Join(diffs, "; "))
	}
	return nil
}

// compareCredits compares an issued invoice's credit_applied lines (in
// draw order, after every other line, each with its grant and its line
// id), its creditsApplied and its amountDue with the model's.
func compareCredits(g invoiceDoc, w *ExpInvoice) []string {
	var diffs, got, want []string
	same := true
	n := 0 // credit lines so far
	for _, l := range g.Lines {
		if l.Kind != "credit_applied" {
			if n > 0 {
				diffs = append(diffs, "a "+l.Kind+" line after a credit_applied line")
			}
			continue
		}
		got = append(got, l.GrantID+" "+l.Amount.String())
		if l.LineID != "credit_applied/"+l.GrantID {
			diffs = append(diffs, fmt.Sprintf("credit line of grant %s: lineId %q", l.GrantID, l.LineID))
		}
		if n >= len(w.Credits) || l.GrantID != w.Credits[n].GrantID || !l.Amount.Equal(w.Credits[n].Drawn.Neg()) {
			same = false
		}
		n++
	}
	for _, c := range w.Credits {
		want = append(want, c.GrantID+" "+c.Drawn.Neg().String())
	}
	if !same || n != len(w.Credits) {
		why := w.CreditWhy
		if why == "" {
			why = fmt.Sprintf("total %s; no grant of %s in effect at the period's end with a balance", w.Total, w.Currency)
		}
		diffs = append(diffs, fmt.Sprintf("credit lines [%s], want [%s] (%s)", strings.Join(got, ", "), strings.Join(want, ", "), why))
	}
	if g.CreditsApplied == nil || !g.CreditsApplied.Equal(w.CreditsApplied) {
		diffs = append(diffs, fmt.Sprintf("creditsApplied %s, want %s", orNil(g.CreditsApplied), w.CreditsApplied))
	}
	if g.AmountDue == nil || !g.AmountDue.Equal(w.AmountDue) {
		diffs = append(diffs, fmt.Sprintf("amountDue %s, want %s (total %s + creditsApplied %s)", orNil(g.AmountDue), w.AmountDue, w.Total, w.CreditsApplied))
	}
	if g.AmountDue != nil && g.AmountDue.IsNegative() {
		diffs = append(diffs, fmt.Sprintf("amountDue %s below zero", g.AmountDue))
	}
	return diffs
}

// credited counts an issued invoice with credit lines the first time it
// agrees with the model.
func (r *runner) credited(t *Tenant, p string, w *ExpInvoice) {
	k := t.ID + " " + p + " " + w.Currency
	if len(w.Credits) == 0 || r.creditedSeen[k] {
		return
	}
	r.creditedSeen[k] = true
	r.stats.CreditedInvoices++
	r.stats.CreditLines += len(w.Credits)
	if w.AmountDue.IsZero() {
		r.stats.FullyCredited++
	}
}
