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

type chargeDoc struct {
	ChargeID     string            `json:"chargeId"`
	UsageEventID string            `json:"usageEventId"`
	MeterCode    string            `json:"meterCode"`
	Currency     string            `json:"currency"`
	Quantity     decimal.Decimal   `json:"quantity"`
	UnitPrice    *decimal.Decimal  `json:"unitPrice"`
	PriceVersion int64             `json:"priceVersion"`
	Amount       *decimal.Decimal  `json:"amount"`
	Period       string            `json:"period"`
	Late         bool              `json:"late"`
	Dimensions   map[string]string `json:"dimensions"`
	Properties   map[string]string `json:"properties"`
	Unpriced     bool              `json:"unpriced"`
	PlanCode     string            `json:"planCode"`
}

func (r *runner) charges(ctx context.Context, t *Tenant, p string) ([]chargeDoc, error) {
	var all []chargeDoc
	cursor := ""
	for {
		q := "/charges?period=" + p + "&limit=1000"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		a, err := r.c.do(ctx, "billing", "GET", t.ID, q, nil, nil)
		if err != nil {
			return nil, err
		}
		if a.Status != 200 {
			return nil, fmt.Errorf("charges of %s %s: %d %s", t.ID, p, a.Status, clip(string(a.Body)))
		}
		var page struct {
			Charges []chargeDoc `json:"charges"`
			Next    string      `json:"next"`
		}
		if err := a.decode(&page); err != nil {
			return nil, err
		}
		all = append(all, page.Charges...)
		if page.Next == "" {
			return all, nil
		}
		cursor = page.Next
	}
}

func (r *runner) settleIfDirty(ctx context.Context, t *Tenant) error {
	if !t.Dirty {
		return nil
	}
	return r.settle(ctx, t)
}

// settle waits until billing lists a charge for every accepted fact and
// checks each charge against the model: meter, currency, quantity, price
// version in effect at occurrence, period, late flag, and under unit pricing
// its unit price and exact amount.
func (r *runner) settle(ctx context.Context, t *Tenant) error {
	r.stats.Settles++
	want := map[string]map[string]*Fact{} // period -> usage event id -> fact
	for _, f := range t.Facts {
		if want[f.Period] == nil {
			want[f.Period] = map[string]*Fact{}
		}
		want[f.Period][f.EventID] = f
	}
	for _, p := range sortedKeys(want) {
		facts := want[p]
		pending := false
		for _, f := range facts {
			if f.ChargeID == "" {
				pending = true
			}
		}
		if !pending {
			continue
		}
		deadline := time.Now().Add(r.cfg.Settle)
		var got []chargeDoc
		for {
			var err error
			if got, err = r.charges(ctx, t, p); err != nil {
				return err
			}
			if len(got) >= len(facts) {
				break
			}
			if time.Now().After(deadline) {
				return fail("charges", "%s %s: billing lists %d charges after %s, the model %d", t.ID, p, len(got), r.cfg.Settle, len(facts))
			}
			// polled: billing rates the facts from its consumer
			time.Sleep(100 * time.Millisecond)
		}
		if len(got) != len(facts) {
			return fail("charges", "%s %s: billing lists %d charges, the model %d", t.ID, p, len(got), len(facts))
		}
		for _, c := range got {
			f := facts[c.UsageEventID]
			if f == nil {
				return fail("charges", "%s %s: charge %s of usage event %s the model does not expect here", t.ID, p, c.ChargeID, c.UsageEventID)
			}
			if err := r.checkCharge(t, f, c); err != nil {
				return err
			}
			f.ChargeID = c.ChargeID
		}
	}
	t.Dirty = false
	return nil
}

func (r *runner) checkCharge(t *Tenant, f *Fact, c chargeDoc) error {
	var diffs []string
	if c.MeterCode != f.Meter || c.Currency != f.Currency {
		diffs = append(diffs, fmt.Sprintf("meter/currency %s %s, want %s %s", c.MeterCode, c.Currency, f.Meter, f.Currency))
	}
	if !c.Quantity.Equal(f.Qty) {
		diffs = append(diffs, fmt.Sprintf("quantity %s, want %s", c.Quantity, f.Qty))
	}
	if c.PriceVersion != f.Version || c.Unpriced != (f.Version == 0) {
		diffs = append(diffs, fmt.Sprintf("price version %d (unpriced %v), want %d (in effect at %s for %v)", c.PriceVersion, c.Unpriced,
			f.Version, f.At.Format(time.RFC3339Nano), f.Props))
	}
	if dimsKey(c.Dimensions) != dimsKey(f.Dims) {
		diffs = append(diffs, fmt.Sprintf("dimensions %v, want %v", c.Dimensions, f.Dims))
	}
	if c.PlanCode != f.Plan {
		diffs = append(diffs, fmt.Sprintf("plan %q, want %q", c.PlanCode, f.Plan))
	}
	if !sameProps(c.Properties, f.Props) {
		diffs = append(diffs, fmt.Sprintf("properties %v, want %v", c.Properties, f.Props))
	}
	if c.Period != f.Period || c.Late != f.Late {
		diffs = append(diffs, fmt.Sprintf("period %s late %v, want %s late %v", c.Period, c.Late, f.Period, f.Late))
	}
	agg := meterDef(f.Meter).Agg
	switch {
	case f.Version == 0:
		if c.Amount != nil && !c.Amount.IsZero() {
			diffs = append(diffs, fmt.Sprintf("amount %v of an unpriced charge", c.Amount))
		}
	case t.pricing(lineKey{f.Meter, f.Version, dimsKey(f.Dims), f.Plan}).Model == Unit && (agg == "" || agg == "sum" || agg == "count"):
		price := t.pricing(lineKey{f.Meter, f.Version, dimsKey(f.Dims), f.Plan}).UnitPrice
		want := f.Qty.Mul(price)
		if agg == "count" {
			want = price // a count charge counts one
		}
		if c.UnitPrice == nil || !c.UnitPrice.Equal(price) {
			diffs = append(diffs, fmt.Sprintf("unitPrice %v, want %s", c.UnitPrice, price))
		}
		if c.Amount == nil || !c.Amount.Equal(want) {
			diffs = append(diffs, fmt.Sprintf("amount %v, want %s", c.Amount, want))
		}
	default: // the line is priced as a whole
		if c.Amount != nil && !c.Amount.IsZero() {
			diffs = append(diffs, fmt.Sprintf("amount %v of a charge whose line is priced as a whole", c.Amount))
		}
	}
	if len(diffs) > 0 {
		return fail("charges", "%s charge of fact %s (%s %s at %s): %s", t.ID, f.SourceEventID, f.Meter, f.Qty,
			f.At.Format(time.RFC3339Nano), strings.Join(diffs, "; "))
	}
	return nil
}

// check settles the tenant and compares billing's estimates of its open
// periods, the invoices of its closed ones (with their correction notes),
// query's summary and invoice's list of its credit grants with the model.
func (r *runner) check(ctx context.Context, t *Tenant) error {
	r.stats.Checks++
	if err := r.settle(ctx, t); err != nil {
		return err
	}
	for _, name := range sortedKeys(t.Periods) {
		p := t.Periods[name]
		if p.Closed {
			if err := r.checkInvoices(ctx, t, name); err != nil {
				return err
			}
			continue
		}
		if len(t.currencies(name, false)) == 0 {
			continue
		}
		if err := r.checkEstimate(ctx, t, name); err != nil {
			return err
		}
		if r.driver() != nil && !r.now().Before(t.end(name)) && t.setting(name).Grace > 0 {
			if err := r.checkDrafts(ctx, t, name); err != nil {
				return err
			}
		}
	}
	if err := r.checkSummary(ctx, t); err != nil {
		return err
	}
	if err := r.checkGrants(ctx, t); err != nil {
		return err
	}
	return r.checkAlerts(ctx, t)
}

func (r *runner) checkEstimate(ctx context.Context, t *Tenant, p string) error {
	want := map[string]decimal.Decimal{}
	for _, c := range t.currencies(p, false) {
		sum := t.adjusted(p, c, nil)
		for _, l := range t.lines(p, c, nil) {
			sum = sum.Add(l.Amount)
		}
		for _, f := range t.fees(p)[c] {
			sum = sum.Add(f.Amount)
		}
		want[c] = sum
	}
	// The charges are settled; a plan version published a moment ago may
	// still be on its way to billing (its fees): poll until Settle ends.
	deadline := time.Now().Add(r.cfg.Settle)
	var now time.Time
	var got struct {
		Status   string                     `json:"status"`
		ClosesAt *time.Time                 `json:"closesAt"`
		Estimate map[string]decimal.Decimal `json:"estimate"`
	}
	for {
		now = r.now()
		a, err := r.c.do(ctx, "billing", "GET", t.ID, "/periods/"+p, nil, nil)
		if err != nil {
			return err
		}
		if a.Status != 200 {
			return fail("estimate", "%s period %s: %d %s", t.ID, p, a.Status, clip(string(a.Body)))
		}
		if err := a.decode(&got); err != nil {
			return err
		}
		d := diffMaps(got.Estimate, want)
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			return fail("estimate", "%s estimate of %s: %s", t.ID, p, d)
		}
		// polled: billing's estimate follows its consumer
		time.Sleep(100 * time.Millisecond)
	}
	if r.driver() != nil { // the wall clock may carry a period across its end at any moment
		if d := checkPeriod(t, p, now, got.Status, got.ClosesAt); len(d) > 0 {
			return fail("period", "%s period %s: %s", t.ID, p, strings.Join(d, "; "))
		}
	}
	return nil
}

type invoiceDoc struct {
	InvoiceID string `json:"invoiceId"`
	Number    *int64 `json:"number"`
	Period    string `json:"period"`
	Currency  string `json:"currency"`
	Status    string `json:"status"`
	Lines     []struct {
		Kind          string            `json:"kind"`
		MeterCode     string            `json:"meterCode"`
		PriceVersion  *int64            `json:"priceVersion"`
		Quantity      decimal.Decimal   `json:"quantity"`
		ChargeCount   int               `json:"chargeCount"`
		Amount        decimal.Decimal   `json:"amount"`
		OriginEventID string            `json:"originEventId"`
		Dimensions    map[string]string `json:"dimensions"`
		PlanCode      string            `json:"planCode"`
		PlanVersion   int64             `json:"planVersion"`
		FeeCode       string            `json:"feeCode"`
		Days          int               `json:"days"`
		PeriodDays    int               `json:"periodDays"`
		TaxCode       string            `json:"taxCode"`
		Name          string            `json:"name"`
		TaxRate       *decimal.Decimal  `json:"taxRate"`
		LineID        string            `json:"lineId"`
		GrantID       string            `json:"grantId"`
	} `json:"lines"`
	Subtotal       decimal.Decimal  `json:"subtotal"`
	TaxTotal       *decimal.Decimal `json:"taxTotal"`
	Total          *decimal.Decimal `json:"total"`
	CreditsApplied *decimal.Decimal `json:"creditsApplied"`
	AmountDue      *decimal.Decimal `json:"amountDue"`
	Corrections    []struct {
		OriginEventID string          `json:"originEventId"`
		Amount        decimal.Decimal `json:"amount"`
	} `json:"corrections"`
}

// checkInvoices waits until every invoice the model expects for closed
// period p is issued with all its correction notes, then compares each
// with the model to the minor unit.
func (r *runner) checkInvoices(ctx context.Context, t *Tenant, p string) error {
	per := t.period(p)
	want := map[string]*ExpInvoice{}
	for _, c := range t.currencies(p, false) {
		want[c] = t.expectInvoice(p, c, true)
		r.stats.FeeLines += len(want[c].Fees)
	}
	deadline := time.Now().Add(r.cfg.Settle)
	var got map[string]invoiceDoc
	for {
		var err error
		if got, err = r.invoices(ctx, t, p); err != nil {
			return err
		}
		ready := true
		for c, w := range want {
			g, ok := got[c]
			if !ok || g.Status != "issued" || len(g.Corrections) < len(w.Corrections) {
				ready = false
			}
		}
		if ready || time.Now().After(deadline) {
			break
		}
		// polled: invoice issues from billing's close event
		time.Sleep(100 * time.Millisecond)
	}
	numbers := map[int64]bool{}
	for _, n := range per.Numbers {
		numbers[n] = true
	}
	for _, c := range sortedKeys(got) {
		if want[c] == nil {
			return fail("invoice", "%s %s: an invoice in %s the model does not expect", t.ID, p, c)
		}
	}
	for _, c := range sortedKeys(want) {
		w := want[c]
		g, ok := got[c]
		if !ok {
			return fail("invoice", "%s %s %s: no invoice after %s", t.ID, p, c, r.cfg.Settle)
		}
		var diffs []string
		if g.Status != "issued" {
			diffs = append(diffs, "status "+g.Status+", want issued")
		}
		if g.Number == nil || !numbers[*g.Number] {
			diffs = append(diffs, fmt.Sprintf("number %v, want one of %v", g.Number, sortedNumbers(numbers)))
		} else {
			delete(numbers, *g.Number)
		}
		diffs = append(diffs, compareLines(t, g, w, true)...)
		if !g.Subtotal.Equal(w.Subtotal) {
			diffs = append(diffs, fmt.Sprintf("subtotal %s, want %s", g.Subtotal, w.Subtotal))
		}
		corr := map[string]decimal.Decimal{}
		for _, a := range w.Corrections {
			corr[a.EventID] = a.Amount
		}
		if len(g.Corrections) != len(w.Corrections) {
			diffs = append(diffs, fmt.Sprintf("%d correction notes, want %d", len(g.Corrections), len(w.Corrections)))
		}
		for _, cn := range g.Corrections {
			if a, ok := corr[cn.OriginEventID]; !ok || !a.Equal(cn.Amount) {
				diffs = append(diffs, fmt.Sprintf("correction note %s %s, want %v", cn.OriginEventID, cn.Amount, orNone(a, ok)))
			}
		}
		taxDiffs, creditDiffs := compareTaxes(g, w), compareCredits(g, w)
		if len(diffs) > 0 {
			return fail("invoice", "%s invoice %s %s: %s", t.ID, p, c, strings.Join(append(append(diffs, taxDiffs...), creditDiffs...), "; "))
		}
		if len(taxDiffs) > 0 { // the rest agrees: a mistake in the taxes (the credits draw on the total)
			return fail("tax", "%s invoice %s %s (%d tax rates of the period): %s", t.ID, p, c, len(w.Taxes), strings.Join(append(taxDiffs, creditDiffs...), "; "))
		}
		if len(creditDiffs) > 0 { // the rest agrees: a mistake in the credits alone
			return fail("credit", "%s invoice %s %s (%d credit lines expected): %s", t.ID, p, c, len(w.Credits), strings.Join(creditDiffs, "; "))
		}
		r.stats.Invoices++
		r.taxed(t, p, w)
		r.credited(t, p, w)
	}
	return nil
}

// taxed counts an issued invoice with tax lines the first time it agrees
// with the model.
func (r *runner) taxed(t *Tenant, p string, w *ExpInvoice) {
	k := t.ID + " " + p + " " + w.Currency
	if len(w.Taxes) == 0 || r.taxedSeen[k] {
		return
	}
	r.taxedSeen[k] = true
	if r.stats.TaxedInvoices == nil {
		r.stats.TaxedInvoices = map[string]int{}
	}
	r.stats.TaxedInvoices[w.Currency]++
	r.stats.TaxLines += len(w.Taxes)
}

// invoices of period p by currency.
func (r *runner) invoices(ctx context.Context, t *Tenant, p string) (map[string]invoiceDoc, error) {
	a, err := r.c.do(ctx, "invoice", "GET", t.ID, "/invoices?period="+p+"&limit=1000", nil, nil)
	if err != nil {
		return nil, err
	}
	var page struct {
		Invoices []invoiceDoc `json:"invoices"`
	}
	if a.Status != 200 {
		return nil, fail("invoice", "%s invoices of %s: %d %s", t.ID, p, a.Status, clip(string(a.Body)))
	}
	if err := a.decode(&page); err != nil {
		return nil, err
	}
	got := map[string]invoiceDoc{}
	for _, inv := range page.Invoices {
		got[inv.Currency] = inv
	}
	return got, nil
}

// compareLines compares an invoice's lines with the model's: one charge
// line per (meter, price version) with its quantity, count and amount, the
// adjustment lines, and once issued the rounding line (its tax lines are
// compareTaxes', its credit lines compareCredits').
func compareLines(t *Tenant, g invoiceDoc, w *ExpInvoice, issued bool) []string {
	var diffs []string
	{
		charge := map[lineKey]bool{}
		adjs := map[string]*Adjustment{}
		for _, a := range w.Adjustments {
			adjs[a.EventID] = a
		}
		rounding := false
		fees := map[string]FeeLine{}
		for _, f := range w.Fees {
			fees[f.key()] = f
		}
		for _, l := range g.Lines {
			switch l.Kind {
			case "fixed_fee", "minimum_true_up":
				k := FeeLine{Kind: l.Kind, Plan: l.PlanCode, Version: l.PlanVersion, Code: l.FeeCode}.key()
				f, ok := fees[k]
				if !ok {
					diffs = append(diffs, fmt.Sprintf("fee line %s %s (%d/%d days) the model does not expect", k, l.Amount, l.Days, l.PeriodDays))
					continue
				}
				delete(fees, k)
				if !l.Amount.Equal(f.Amount) || l.Days != f.Days || l.PeriodDays != f.Of {
					diffs = append(diffs, fmt.Sprintf("fee line %s: %s for %d/%d days, want %s for %d/%d", k, l.Amount, l.Days, l.PeriodDays, f.Amount, f.Days, f.Of))
				}
			case "charge", "unpriced":
				k := lineKey{Meter: l.MeterCode}
				switch {
				case l.Kind == "unpriced" && l.PriceVersion != nil && *l.PriceVersion != 0:
					diffs = append(diffs, fmt.Sprintf("an unpriced line of %s with price version %d", l.MeterCode, *l.PriceVersion))
					continue
				case l.Kind == "charge" && l.PriceVersion == nil:
					diffs = append(diffs, "a charge line without price version")
					continue
				case l.Kind == "charge" && l.PlanCode != "" && l.PlanVersion != *l.PriceVersion:
					diffs = append(diffs, fmt.Sprintf("a line of plan %s with planVersion %d and priceVersion %d", l.PlanCode, l.PlanVersion, *l.PriceVersion))
					continue
				case l.Kind == "charge":
					k.Version, k.Dims, k.Plan = *l.PriceVersion, dimsKey(l.Dimensions), l.PlanCode
				}
				wl := w.Charge[k]
				if wl == nil {
					diffs = append(diffs, fmt.Sprintf("charge line %s the model does not expect", k))
					continue
				}
				charge[k] = true
				if !l.Quantity.Equal(wl.Qty) || l.ChargeCount != wl.Count || !l.Amount.Equal(wl.Amount) {
					pricing := "unpriced"
					if k.Version > 0 {
						pricing = t.pricing(k).String()
					}
					diffs = append(diffs, fmt.Sprintf("line %s (%s, %s): quantity %s count %d amount %s, want %s %d %s", k,
						pricing, aggName(k.Meter), l.Quantity, l.ChargeCount, l.Amount, wl.Qty, wl.Count, wl.Amount))
				}
			case "adjustment":
				a := adjs[l.OriginEventID]
				if a == nil {
					diffs = append(diffs, fmt.Sprintf("adjustment line %s %s the model does not expect", l.OriginEventID, l.Amount))
					continue
				}
				delete(adjs, l.OriginEventID)
				if !l.Amount.Equal(a.Amount) {
					diffs = append(diffs, fmt.Sprintf("adjustment line %s: %s, want %s", l.OriginEventID, l.Amount, a.Amount))
				}
			case "tax": // compared by compareTaxes once issued
				if !issued {
					diffs = append(diffs, fmt.Sprintf("a tax line %s %s before issue", l.TaxCode, l.Amount))
				}
			case "credit_applied": // compared by compareCredits once issued
				if !issued {
					diffs = append(diffs, fmt.Sprintf("a credit_applied line of grant %s %s before issue", l.GrantID, l.Amount))
				}
			case "rounding":
				rounding = true
				if !l.Amount.Equal(w.Rounding) {
					diffs = append(diffs, fmt.Sprintf("rounding line %s, want %s", l.Amount, w.Rounding))
				}
			default:
				diffs = append(diffs, "a line of kind "+l.Kind)
			}
		}
		for k, wl := range w.Charge {
			if !charge[k] {
				diffs = append(diffs, fmt.Sprintf("no charge line %s (want quantity %s amount %s)", k, wl.Qty, wl.Amount))
			}
		}
		for id, a := range adjs {
			diffs = append(diffs, fmt.Sprintf("no adjustment line %s (%s)", id, a.Amount))
		}
		for k, f := range fees {
			diffs = append(diffs, fmt.Sprintf("no fee line %s (%s for %d/%d days)", k, f.Amount, f.Days, f.Of))
		}
		if issued && !rounding && !w.Rounding.IsZero() {
			diffs = append(diffs, fmt.Sprintf("no rounding line, want %s", w.Rounding))
		}
		if !issued && rounding {
			diffs = append(diffs, "a rounding line before issue")
		}
	}
	return diffs
}

func aggName(meter string) string {
	if a := meterDef(meter).Agg; a != "" {
		return a
	}
	return "sum"
}

func orNone(d decimal.Decimal, ok bool) string {
	if !ok {
		return "none"
	}
	return d.String()
}

func sortedNumbers(m map[int64]bool) []int64 {
	var out []int64
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (r *runner) checkSummary(ctx context.Context, t *Tenant) error {
	want := t.expectSummary()
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		a, err := r.c.do(ctx, "query", "GET", t.ID, "/summary", nil, nil)
		if err != nil {
			return err
		}
		if a.Status != 200 {
			return fail("summary", "%s summary: %d %s", t.ID, a.Status, clip(string(a.Body)))
		}
		var got struct {
			Usage struct {
				Count           int64                      `json:"count"`
				QuantityByMeter map[string]decimal.Decimal `json:"quantityByMeter"`
			} `json:"usage"`
			Charged  map[string]decimal.Decimal `json:"charged"`
			Adjusted map[string]decimal.Decimal `json:"adjusted"`
			Invoiced map[string]decimal.Decimal `json:"invoiced"`
		}
		if err := a.decode(&got); err != nil {
			return err
		}
		var diffs []string
		if got.Usage.Count != want.Count {
			diffs = append(diffs, fmt.Sprintf("usage count %d, want %d", got.Usage.Count, want.Count))
		}
		for _, x := range []struct {
			name      string
			got, want map[string]decimal.Decimal
		}{{"quantityByMeter", got.Usage.QuantityByMeter, want.QuantityByMeter}, {"charged", got.Charged, want.Charged},
			{"adjusted", got.Adjusted, want.Adjusted}, {"invoiced", got.Invoiced, want.Invoiced}} {
			if d := diffMaps(x.got, x.want); d != "" {
				diffs = append(diffs, x.name+": "+d)
			}
		}
		if len(diffs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fail("summary", "%s summary after %s: %s", t.ID, r.cfg.Settle, strings.Join(diffs, "; "))
		}
		// polled: query folds the events from its consumer
		time.Sleep(150 * time.Millisecond)
	}
}

// diffMaps compares amounts by key, a missing key counting as zero.
func diffMaps(got, want map[string]decimal.Decimal) string {
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var diffs []string
	for _, k := range sortedKeys(keys) {
		if !got[k].Equal(want[k]) {
			diffs = append(diffs, fmt.Sprintf("%s %s, want %s", k, got[k], want[k]))
		}
	}
	return strings.Join(diffs, ", ")
}

// ---- random prices and quantities ----

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func pick(rng *rand.Rand, xs ...string) decimal.Decimal { return dec(xs[rng.IntN(len(xs))]) }

func randomPricing(rng *rand.Rand, currency string) Pricing {
	switch rng.IntN(4) {
	case 0:
		return Pricing{Model: Unit, UnitPrice: pick(rng, "0.0015", "0.5", "12.5", "3", "0.001234", "7", "0.25", "1.005")}
	case 1, 2:
		model := Graduated
		if rng.IntN(2) == 0 {
			model = Volume
		}
		n := 1 + rng.IntN(4)
		var tiers []Tier
		bound := decimal.Zero
		price := pick(rng, "2", "1.5", "0.75", "0.02", "3.333")
		for i := 0; i < n; i++ {
			t := Tier{UnitPrice: price}
			if i == 0 && rng.IntN(3) == 0 {
				t.UnitPrice = decimal.Zero // a free allowance
			}
			if rng.IntN(2) == 0 {
				t.FlatFee = pick(rng, "1", "0.5", "10", "2.25")
			}
			if i < n-1 {
				bound = bound.Add(pick(rng, "5", "10", "20", "37.5", "50", "100"))
				b := bound
				t.UpTo = &b
			}
			tiers = append(tiers, t)
			price = price.Mul(pick(rng, "0.5", "0.8", "1", "1.2")) // usually cheaper further up
		}
		return Pricing{Model: model, Tiers: tiers}
	default:
		return Pricing{Model: Package, PackageSize: pick(rng, "1", "2.5", "10", "25", "0.5"), PackagePrice: pick(rng, "2.50", "0.99", "13", "7.125")}
	}
}

// invalidPricing is a price meter must refuse, and the code it refuses
// with (meter's OpenAPI document, pkg/api/meterapi/openapi.yaml).
func invalidPricing(rng *rand.Rand) (map[string]any, string) {
	switch rng.IntN(3) {
	case 0:
		return map[string]any{"model": "graduated", "tiers": []map[string]any{{"upTo": "10", "unitPrice": "1"}, {"upTo": "5", "unitPrice": "1"}, {"unitPrice": "1"}}}, "tiers_not_ascending"
	case 1:
		return map[string]any{"model": "volume", "tiers": []map[string]any{{"upTo": "10", "unitPrice": "1"}, {"upTo": "20", "unitPrice": "0.5"}}}, "last_tier_not_open"
	default:
		return map[string]any{"model": "package", "packageSize": "0", "packagePrice": "1"}, "invalid_package_size"
	}
}

func randomQty(rng *rand.Rand) decimal.Decimal {
	switch x := rng.IntN(100); {
	case x < 45:
		return decimal.NewFromInt(int64(1 + rng.IntN(20)))
	case x < 75:
		return decimal.New(int64(1+rng.IntN(5000)), -int32(1+rng.IntN(3)))
	case x < 85:
		return decimal.NewFromInt(int64(20 + rng.IntN(120)))
	case x < 88:
		return decimal.Zero
	default:
		return decimal.New(int64(1+rng.IntN(1_000_000)), -12)
	}
}
