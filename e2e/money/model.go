package money

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Clock is the model's time, the services' own: the wall clock plus the
// offset the test writes to the services' CLOCK_OFFSET_FILE (decision 0015).
type Clock interface{ Now() time.Time }

// Driver is a Clock the test can move forward (every service at once).
type Driver interface {
	Clock
	// Advance moves the clock forward to at least to.
	Advance(to time.Time) error
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Version is one price version of a series as meter answered it. Dims are
// the property values it prices (none: the series' default).
type Version struct {
	N       int64
	Eff     time.Time
	Pricing Pricing
	Dims    map[string]string
}

// Series is a tenant's price series of one meter (one currency per meter).
type Series struct {
	Meter, Currency string
	Versions        []Version // in version order
}

// inEffect is the version that prices a fact with props at t (decision
// 0011, DESIGN.md section 3a): the series is a price sheet, one entry per
// dimension set, the entry of a set being its highest version whose
// effectiveAt is at or before t; the fact takes the most specific entry
// whose values all equal its properties. nil: no entry applies (unpriced).
func (s *Series) inEffect(t time.Time, props map[string]string) *Version {
	entries := map[string]*Version{}
	for i := range s.Versions {
		v := &s.Versions[i]
		k := dimsKey(v.Dims)
		if e := entries[k]; !v.Eff.After(t) && (e == nil || v.N > e.N) {
			entries[k] = v
		}
	}
	var best *Version
	for _, v := range entries {
		if !dimsMatch(v.Dims, props) {
			continue
		}
		if best == nil {
			best = v
			continue
		}
		more := len(v.Dims) > len(best.Dims)
		if mutation == "least-specific" { // a deliberately wrong model: the least specific entry wins
			more = len(v.Dims) < len(best.Dims)
		}
		if more || (len(v.Dims) == len(best.Dims) && dimsKey(v.Dims) < dimsKey(best.Dims)) {
			best = v
		}
	}
	return best
}

// dimsMatch: every value a price names equals the fact's property.
func dimsMatch(dims, props map[string]string) bool {
	for k, v := range dims {
		if props[k] != v {
			return false
		}
	}
	return true
}

// dimsKey is a dimension set as a string: name=value pairs in name order.
func dimsKey(d map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(d) {
		parts = append(parts, k+"="+d[k])
	}
	return strings.Join(parts, ",")
}

// ambiguous reports whether a new entry of dims would be as specific as one
// the series has and could match the same fact (refused: ambiguous_price).
func (s *Series) ambiguous(dims map[string]string) bool {
	for _, v := range s.Versions {
		if len(v.Dims) != len(dims) || dimsKey(v.Dims) == dimsKey(dims) {
			continue
		}
		agree := true
		for k, x := range dims {
			if y, ok := v.Dims[k]; ok && y != x {
				agree = false
			}
		}
		if agree {
			return true
		}
	}
	return false
}

func (s *Series) version(n int64) *Version {
	for i := range s.Versions {
		if s.Versions[i].N == n {
			return &s.Versions[i]
		}
	}
	return nil
}

// Fact is an accepted usage fact and the charge the model expects for it.
type Fact struct {
	SourceEventID string
	Meter         string
	Currency      string
	// NamesCurrency: the fact is sent with its currency (else usage infers
	// it from the tenant's only series of the meter).
	NamesCurrency bool
	Qty           decimal.Decimal
	At            time.Time
	UsageID       string
	EventID       string
	Props         map[string]string
	Period        string            // the period it is rated into
	Version       int64             // 0: unpriced
	Dims          map[string]string // of the version that rated it
	Plan          string            // the plan whose charge rated it ("" its own price)
	Late          bool
	ChargeID      string // known once billing listed it
}

func (f *Fact) body() map[string]any {
	b := map[string]any{"sourceSystem": sourceSystem, "sourceEventId": f.SourceEventID, "meterCode": f.Meter,
		"quantity": f.Qty.String(), "occurredAt": f.At.UTC().Format(time.RFC3339Nano)}
	if len(f.Props) > 0 {
		b["properties"] = f.Props
	}
	if f.NamesCurrency {
		b["currency"] = f.Currency
	}
	return b
}

const sourceSystem = "money-test"

// Adjustment is a posted adjustment.
type Adjustment struct {
	Key          string
	Body         map[string]any
	AdjustmentID string
	EventID      string
	Fact         *Fact
	Period       string
	Currency     string
	Amount       decimal.Decimal
	AfterClose   bool
	Raw          []byte // the first answer, for replays
}

// Period is a billing period of a tenant.
type Period struct {
	Name    string
	Closed  bool
	Numbers map[string]int64     // currency -> invoice number, once issued (checked as a set)
	Fees    map[string][]FeeLine // by currency, as the close computed them
	// Credits are what each issued invoice drew from the credit grants, by
	// currency, in draw order; CreditWhy how (for a failure's message).
	Credits   map[string][]CreditLine
	CreditWhy map[string]string
}

// Tenant is the model of one tenant.
type Tenant struct {
	ID          string
	Created     time.Time
	Series      map[string]*Series // by meter
	Facts       []*Fact
	byIdentity  map[string]*Fact
	Adjs        []*Adjustment
	Periods     map[string]*Period
	NextNumber  int64
	Dirty       bool      // facts accepted since billing last listed them all
	Settings    []Setting // by From, ascending; before the first: UTC, one hour of grace
	Subs        []*Subscription
	Grants      []*Grant         // prepaid credits, in creation order
	plans       map[string]*Plan // the run's, by code
	nextEventID int
	// Alerts are the tenant's alerts, in creation order (alerts.go);
	// seenFacts and seenAdjs how many of Facts and Adjs invoice had
	// applied at the last point the model decided them.
	Alerts              []*Alert
	seenFacts, seenAdjs int
}

// Setting is a tenant's time zone, grace period and tax rates for the
// periods from From on (docs/money.md, decision 0014, DESIGN.md section 3a).
type Setting struct {
	From  string
	Zone  *time.Location
	Grace time.Duration
	Taxes []TaxRate // in the order the request listed them
}

// defaultSetting: UTC, one hour of grace, no tax rates.
var defaultSetting = Setting{Zone: time.UTC, Grace: time.Hour}

// latestSetting is the tenant's last settings as sent (a pending change
// included): what a new request, which replaces them all, keeps of them.
func (t *Tenant) latestSetting() Setting {
	if n := len(t.Settings); n > 0 {
		return t.Settings[n-1]
	}
	return defaultSetting
}

func newTenant(id string, now time.Time, plans map[string]*Plan) *Tenant {
	return &Tenant{ID: id, Created: now, Series: map[string]*Series{}, byIdentity: map[string]*Fact{},
		Periods: map[string]*Period{}, NextNumber: 1, plans: plans}
}

// setting of period p: the latest whose From is at or before p.
func (t *Tenant) setting(p string) Setting {
	s := defaultSetting
	for _, x := range t.Settings {
		if x.From <= p {
			s = x
		}
	}
	if mutation == "utc-periods" { // a deliberately wrong model: zones ignored
		s.Zone = time.UTC
	}
	return s
}

// end of period p: the first instant of the next month in p's zone. A
// period begins where the one before it ended, so periods tile time even
// across a change of zone (the first period of a new zone is a few hours
// longer or shorter).
func (t *Tenant) end(p string) time.Time {
	m, err := time.Parse("2006-01", nextPeriod(p))
	if err != nil {
		panic(err)
	}
	return time.Date(m.Year(), m.Month(), 1, 0, 0, 0, 0, t.setting(p).Zone).UTC()
}

func (t *Tenant) start(p string) time.Time { return t.end(prevPeriod(p)) }

// closesAt is when the scheduler closes p: its end plus its grace.
func (t *Tenant) closesAt(p string) time.Time { return t.end(p).Add(t.setting(p).Grace) }

// periodOf is the period whose interval holds at: the UTC month of at or
// a neighbour (zones are within 14 hours of UTC).
func (t *Tenant) periodOf(at time.Time) string {
	m := at.UTC().Format("2006-01")
	for _, p := range []string{prevPeriod(m), m, nextPeriod(m)} {
		if !at.Before(t.start(p)) && at.Before(t.end(p)) {
			return p
		}
	}
	panic(fmt.Sprintf("%s: no period holds %s", t.ID, at))
}

func nextPeriod(p string) string { return addMonths(p, 1) }

func prevPeriod(p string) string { return addMonths(p, -1) }

func addMonths(p string, n int) string {
	m, err := time.Parse("2006-01", p)
	if err != nil {
		panic(err)
	}
	return m.AddDate(0, n, 0).Format("2006-01")
}

// openCharged are the open periods the scheduler closes, in order: those
// with charges, and those a subscription holds in (its fees).
func (t *Tenant) openCharged(now time.Time) []string {
	set := map[string]bool{}
	for _, f := range t.Facts {
		if !t.period(f.Period).Closed {
			set[f.Period] = true
		}
	}
	for _, s := range t.Subs {
		for p := t.periodOf(s.Start); p <= t.periodOf(maxTime(s.Start, now)); p = nextPeriod(p) {
			if !t.period(p).Closed && t.subscribedIn(p) {
				set[p] = true
			}
		}
	}
	return sortedKeys(set)
}

func (t *Tenant) period(name string) *Period {
	p := t.Periods[name]
	if p == nil {
		p = &Period{Name: name, Numbers: map[string]int64{}}
		t.Periods[name] = p
	}
	return p
}

// target is the period a fact occurring at `at` is rated into: its own
// while neither it nor a later period is closed, else the period after the
// last closed one (late): periods close in order, so one before a closed
// period bills nothing more, even one that never had a charge.
func (t *Tenant) target(at time.Time) (string, bool) {
	p := t.periodOf(at)
	last := ""
	for name, per := range t.Periods {
		if per.Closed && name >= p && name > last {
			last = name
		}
	}
	if last == "" {
		return p, false
	}
	return nextPeriod(last), true
}

// rated is the period and lateness the model predicts for a fact
// occurring at `at` (target; the mutation changes the prediction alone,
// not which facts are sent).
func (t *Tenant) rated(at time.Time) (string, bool) {
	if mutation == "late-into-earlier-open" { // a deliberately wrong model: an open period before a closed one still takes charges
		p, late := t.periodOf(at), false
		for t.period(p).Closed {
			p, late = nextPeriod(p), true
		}
		return p, late
	}
	return t.target(at)
}

// feeWindow is how far back billing's close scheduler (and the order of
// closes) counts a period a subscription holds in as one to bill.
const feeWindow = 92 * 24 * time.Hour

// laterClose is a close of p1, the period in progress, while an earlier
// period is open; blocking is the earliest open one after the last closed
// period before p1 that has something to bill (a charge, or a
// subscription's fee), which billing closes first (periods close in
// order); "" when the open ones are empty and p1 may close.
func (t *Tenant) laterClose(now time.Time) (p1, blocking string, ok bool) {
	p1 = t.periodOf(now)
	if t.earliestOpen() >= p1 || t.period(p1).Closed {
		return "", "", false
	}
	last := ""
	for name, per := range t.Periods {
		if per.Closed && name < p1 && name > last {
			last = name
		}
	}
	for p := t.earliestOpen(); p < p1; p = nextPeriod(p) {
		if p <= last || t.period(p).Closed {
			continue
		}
		if t.subscribedIn(p) && p >= t.periodOf(now.Add(-feeWindow)) {
			return p1, p, true
		}
		for _, f := range t.Facts {
			if f.Period == p {
				return p1, p, true
			}
		}
	}
	return p1, "", true
}

// behindClosed is an instant in an open period of the tenant without a
// charge that lies before a closed period (a fact of it is late, past the
// closed one), between lo and now; false when there is none. The months
// before the tenant began are such periods once one of its periods closed.
func (t *Tenant) behindClosed(lo, now time.Time, pick func(n int64) int64) (time.Time, bool) {
	var cands []string
	for p := t.periodOf(lo); t.end(p).Before(now); p = nextPeriod(p) {
		if t.period(p).Closed || t.subscribedIn(p) {
			continue
		}
		charged, later := false, false
		for _, f := range t.Facts {
			charged = charged || f.Period == p
		}
		for name, per := range t.Periods {
			later = later || (per.Closed && name > p)
		}
		if !charged && later {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return time.Time{}, false
	}
	p := cands[pick(int64(len(cands)))]
	from, to := t.start(p), t.end(p).Add(-time.Microsecond)
	if from.Before(lo) {
		from = lo
	}
	if !from.Before(to) {
		return time.Time{}, false
	}
	return instant(from.Add(time.Duration(pick(int64(to.Sub(from)))))), true
}

// earliestOpen is the earliest open period from the tenant's first month.
func (t *Tenant) earliestOpen() string {
	p := t.periodOf(t.Created)
	for t.period(p).Closed {
		p = nextPeriod(p)
	}
	return p
}

// lineKey is an invoice line of charges: one per (meter, price version,
// the version's dimensions, plan); Version 0 is the meter's unpriced line.
// A plan's charge is its own line, its version the plan's.
type lineKey struct {
	Meter   string
	Version int64
	Dims    string // dimsKey
	Plan    string // "" for the tenant's own price
}

type line struct {
	Qty    decimal.Decimal
	Count  int
	Amount decimal.Decimal
	Floor  decimal.Decimal
	facts  []*Fact
}

// lines are the lines of charges of period p in currency c, over the facts
// `include` admits: each line's quantity is its meter's aggregation over
// its facts (aggregate), its amount the version's pricing of that quantity
// (zero when unpriced).
func (t *Tenant) lines(p, c string, include func(*Fact) bool) map[lineKey]*line {
	out := map[lineKey]*line{}
	for _, f := range t.Facts {
		if f.Period != p || f.Currency != c || (include != nil && !include(f)) {
			continue
		}
		k := lineKey{f.Meter, f.Version, dimsKey(f.Dims), f.Plan}
		l := out[k]
		if l == nil {
			l = &line{}
			out[k] = l
		}
		l.facts = append(l.facts, f)
		l.Count++
	}
	for k, l := range out {
		l.Qty = aggregate(meterDef(k.Meter), l.facts)
		if k.Version == 0 {
			continue
		}
		pr := t.pricing(k)
		l.Amount = pr.Amount(l.Qty)
		l.Floor = pr.Floor(l.Qty)
		if meterDef(k.Meter).Agg == "latest" {
			// the next fact may lower a latest line: a credit may not count on it
			l.Floor = decimal.Zero
		}
	}
	return out
}

// aggregate is meter m's figure over facts (DESIGN.md section 3a): sum of
// quantities, count of facts, largest quantity, quantity of the latest fact
// (occurredAt, then the larger source event id: one source system here),
// or the number of distinct values of the value property.
func aggregate(m meterDefinition, facts []*Fact) decimal.Decimal {
	switch m.Agg {
	case "count":
		return decimal.NewFromInt(int64(len(facts)))
	case "max":
		best := facts[0].Qty
		for _, f := range facts {
			if f.Qty.GreaterThan(best) {
				best = f.Qty
			}
		}
		return best
	case "latest":
		best := facts[0]
		for _, f := range facts {
			later := f.At.After(best.At) || (f.At.Equal(best.At) && f.SourceEventID > best.SourceEventID)
			if mutation == "latest-first" { // a deliberately wrong model: the earliest fact wins
				later = f.At.Before(best.At)
			}
			if later {
				best = f
			}
		}
		return best.Qty
	case "unique_count":
		seen := map[string]bool{}
		for _, f := range facts {
			seen[f.Props[m.ValueProp]] = true
		}
		if mutation == "unique-counts-facts" { // a deliberately wrong model
			return decimal.NewFromInt(int64(len(facts)))
		}
		return decimal.NewFromInt(int64(len(seen)))
	default:
		sum := decimal.Zero
		for _, f := range facts {
			sum = sum.Add(f.Qty)
		}
		return sum
	}
}

// currencies of period p: those with a charge, an adjustment or a fee
// line in it.
func (t *Tenant) currencies(p string, beforeCloseOnly bool) []string {
	set := map[string]bool{}
	for c := range t.periodFees(p) {
		set[c] = true
	}
	for _, f := range t.Facts {
		if f.Period == p {
			set[f.Currency] = true
		}
	}
	for _, a := range t.Adjs {
		if a.Period == p && (!beforeCloseOnly || !a.AfterClose) {
			set[a.Currency] = true
		}
	}
	return sortedKeys(set)
}

func (t *Tenant) adjusted(p, c string, afterClose *bool) decimal.Decimal {
	sum := decimal.Zero
	for _, a := range t.Adjs {
		if a.Period == p && a.Currency == c && (afterClose == nil || a.AfterClose == *afterClose) {
			sum = sum.Add(a.Amount)
		}
	}
	return sum
}

// room is what a credit in (p, c) may take at most: the lines at their
// floor plus every adjustment (decision 0010), over the facts include admits.
func (t *Tenant) room(p, c string, include func(*Fact) bool) decimal.Decimal {
	sum := t.adjusted(p, c, nil)
	for _, l := range t.lines(p, c, include) {
		sum = sum.Add(l.Floor)
	}
	return sum
}

// ExpInvoice is the invoice the model expects.
type ExpInvoice struct {
	Currency    string
	Charge      map[lineKey]*line
	Fees        []FeeLine // on the issued invoice only
	Adjustments []*Adjustment
	Subtotal    decimal.Decimal
	Rounding    decimal.Decimal
	Taxes       []TaxLine // on the issued invoice only
	TaxTotal    decimal.Decimal
	Total       decimal.Decimal // the rounded subtotal plus the taxes
	// Credits are the credit_applied lines of the issued invoice (what it
	// drew from each grant, in draw order); CreditsApplied their sum
	// (negative, or zero) and AmountDue the total plus it.
	Credits        []CreditLine
	CreditsApplied decimal.Decimal
	AmountDue      decimal.Decimal
	CreditWhy      string
	Corrections    []*Adjustment
}

// expectInvoice is the invoice of period p in currency c; with its fee,
// tax and credit lines once issued (an open or draft invoice has none: they
// come with billing's close and the invoice's issue).
func (t *Tenant) expectInvoice(p, c string, issued bool) *ExpInvoice {
	inv := &ExpInvoice{Currency: c, Charge: t.lines(p, c, nil)}
	sub := decimal.Zero
	for _, l := range inv.Charge {
		sub = sub.Add(l.Amount)
	}
	if issued {
		inv.Fees = t.periodFees(p)[c]
		for _, f := range inv.Fees {
			sub = sub.Add(f.Amount)
		}
	}
	for _, a := range t.Adjs {
		if a.Period != p || a.Currency != c {
			continue
		}
		if a.AfterClose {
			inv.Corrections = append(inv.Corrections, a)
		} else {
			inv.Adjustments = append(inv.Adjustments, a)
			sub = sub.Add(a.Amount)
		}
	}
	inv.Subtotal = sub
	rounded := roundTotal(sub, c)
	inv.Rounding = rounded.Sub(sub)
	if issued {
		inv.Taxes = taxLines(t.setting(p).Taxes, sub, rounded, c)
	}
	for _, x := range inv.Taxes {
		inv.TaxTotal = inv.TaxTotal.Add(x.Amount)
	}
	inv.Total = rounded.Add(inv.TaxTotal)
	if issued {
		per := t.period(p)
		inv.Credits, inv.CreditWhy = per.Credits[c], per.CreditWhy[c]
	}
	for _, x := range inv.Credits {
		inv.CreditsApplied = inv.CreditsApplied.Sub(x.Drawn)
	}
	inv.AmountDue = inv.Total.Add(inv.CreditsApplied)
	return inv
}

// Summary is query's tenant summary as the model expects it.
type Summary struct {
	Count           int64
	QuantityByMeter map[string]decimal.Decimal
	Charged         map[string]decimal.Decimal
	Adjusted        map[string]decimal.Decimal
	Invoiced        map[string]decimal.Decimal
}

// expectSummary: usage counted from every accepted fact; charged every
// line's amount (a line: the period rated into, meter, version, its
// dimensions; under unit pricing of sum and count meters the sum of its
// charges' amounts, else its pricing over its aggregated quantity,
// decision 0012); adjusted every
// adjustment; invoiced the issued totals (taxes included) plus the
// correction notes.
func (t *Tenant) expectSummary() Summary {
	s := Summary{QuantityByMeter: map[string]decimal.Decimal{}, Charged: map[string]decimal.Decimal{},
		Adjusted: map[string]decimal.Decimal{}, Invoiced: map[string]decimal.Decimal{}}
	type pc struct{ period, currency string }
	seen := map[pc]bool{}
	for _, f := range t.Facts {
		s.Count++
		s.QuantityByMeter[f.Meter] = s.QuantityByMeter[f.Meter].Add(f.Qty)
		seen[pc{f.Period, f.Currency}] = true
	}
	for k := range seen {
		for _, l := range t.lines(k.period, k.currency, nil) {
			s.Charged[k.currency] = s.Charged[k.currency].Add(l.Amount)
		}
	}
	for _, a := range t.Adjs {
		s.Adjusted[a.Currency] = s.Adjusted[a.Currency].Add(a.Amount)
	}
	for _, p := range t.Periods {
		if !p.Closed {
			continue
		}
		for _, c := range t.currencies(p.Name, false) {
			inv := t.expectInvoice(p.Name, c, true)
			if len(inv.Charge) == 0 && len(inv.Adjustments) == 0 && len(inv.Fees) == 0 {
				continue
			}
			s.Invoiced[c] = s.Invoiced[c].Add(inv.Total)
			for _, a := range inv.Corrections {
				s.Invoiced[c] = s.Invoiced[c].Add(a.Amount)
			}
		}
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (k lineKey) String() string {
	if k.Version == 0 {
		return k.Meter + " unpriced"
	}
	if k.Plan != "" {
		return fmt.Sprintf("%s plan %s v%d {%s}", k.Meter, k.Plan, k.Version, k.Dims)
	}
	if k.Dims != "" {
		return fmt.Sprintf("%s v%d {%s}", k.Meter, k.Version, k.Dims)
	}
	return fmt.Sprintf("%s v%d", k.Meter, k.Version)
}
