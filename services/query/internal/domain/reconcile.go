package domain

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/recon"
)

// Mismatch kinds, each naming the origin event id it is about.
const (
	// MismatchMissingCharge: a usage fact (its UsageAccepted) has no charge.
	MismatchMissingCharge = "missing_charge"
	// MismatchDuplicateCharge: a usage fact has more than one charge.
	MismatchDuplicateCharge = "duplicate_charge"
	// MismatchChargeWithoutUsage: a charge (its ChargeRated) rates a usage
	// event usage does not hold.
	MismatchChargeWithoutUsage = "charge_without_usage"
	// MismatchMissingInvoiceLine: a charge or an adjustment has no invoice
	// line (nor, for an adjustment, a correction note).
	MismatchMissingInvoiceLine = "missing_invoice_line"
	// MismatchDuplicateInvoiceLine: a charge or an adjustment is invoiced
	// more than once.
	MismatchDuplicateInvoiceLine = "duplicate_invoice_line"
	// MismatchLineWithoutOrigin: an invoice line whose origin event billing
	// does not hold.
	MismatchLineWithoutOrigin = "invoice_line_without_origin"
	// MismatchLineTotal: an aggregated invoice line's quantity, charge count
	// or amount is not the sum of what it counts (the id is the invoice's).
	MismatchLineTotal = "line_total_mismatch"
	// MismatchChargePeriod: a charge is not in the period it belongs to: not
	// late and rated into another period than the one its usage occurred in
	// by the tenant's calendar, late into a period not after that one, or
	// counted by an invoice of another period than the charge's.
	MismatchChargePeriod = "charge_period_mismatch"
	// MismatchAmount: two services disagree on an amount or quantity.
	MismatchAmount = "amount_mismatch"
	// MismatchMissingInQuery: the query projection lacks a fact another
	// service holds.
	MismatchMissingInQuery = "missing_in_query"
	// MismatchQueryAmount: the query projection holds another amount.
	MismatchQueryAmount = "query_amount_mismatch"
	// MismatchUnknownInQuery: the query projection holds a fact no service
	// holds.
	MismatchUnknownInQuery = "unknown_in_query"
)

// MaxMismatches is how many mismatches a report lists; it counts them all.
const MaxMismatches = 1000

// Mismatch is one broken invariant.
type Mismatch struct {
	Kind          string
	OriginEventID uuid.UUID
	Detail        string
}

// Counts are the sizes of what was compared.
type Counts struct {
	UsageFacts   int
	Charges      int
	InvoiceLines int // charge and adjustment lines and correction notes
	QueryUsage   int
}

// Report is the outcome of a reconciliation: no mismatch means healthy.
// Mismatches lists at most MaxMismatches of them; MismatchCount counts all.
type Report struct {
	TenantID      string
	Period        string
	Counts        Counts
	Mismatches    []Mismatch
	MismatchCount int
}

// Sources are the ordered streams a reconciliation of a period merges (see
// recon's sets). "The months" are the period and the months its charges
// touch (billing's SetMonths): each stream of them is the months' streams
// merged.
type Sources struct {
	UsageFacts     *recon.Stream[recon.UsageFact]   // usage: the months' facts
	Charges        *recon.Stream[recon.Charge]      // billing: the period's charges
	InvoiceCharges *recon.Stream[recon.InvoiceLine] // invoice: the months' counted charges
	QueryUsage     *recon.Stream[recon.UsageFact]   // query: the months' projected facts
	QueryCharges   *recon.Stream[recon.Charge]      // query: the months' projected charges
	// QueryObservations: what the months' projected charges contribute to
	// their lines' aggregation (nil: none; every line is then a sum).
	QueryObservations *recon.Stream[ChargeObservation]

	Adjustments      *recon.Stream[recon.Adjustment]  // billing: the period's adjustments
	InvoiceLines     *recon.Stream[recon.InvoiceLine] // invoice: the months' adjustment and rounding lines
	Corrections      *recon.Stream[recon.Correction]  // invoice: the period's correction notes
	QueryAdjustments *recon.Stream[recon.Adjustment]  // query: the period's projected adjustments
	QueryCorrections *recon.Stream[recon.Correction]  // query: the period's projected corrections

	LineTotals    *recon.Stream[recon.LineTotal] // invoice: the months' lines as shown
	QueryInvoices *recon.Stream[recon.Invoice]   // query: the period's projected issued invoices
	Prices        *recon.Stream[recon.Price]     // meter: the tenant's price versions
}

// Reconcile checks the invariants of one tenant and period, by origin event
// id: every usage fact has exactly one charge, of its quantity; every charge
// rates a usage fact; every charge and adjustment is counted in exactly one
// invoice line (a charge in the line of its meter and price version), at its
// amount, and every line counts only charges and adjustments billing holds;
// each aggregated line's quantity, charge count and amount are the sums of
// what it counts; the query projection holds the same facts with the same
// amounts, and no others, and each issued invoice's projected total is the
// sum of its lines.
//
// The scope is the usage that occurred in the UTC month of the period's
// name, the charges rated into the period or rating that usage (into another
// period: late, or a tenant in another time zone whose boundaries are not
// UTC's), the
// adjustments of the period, and the lines of the invoices that count them.
// The streams may hold more rows (of the other months the scope touches);
// only the scope is checked. Reconcile merges the streams in two passes, by
// usage event id and by adjustment event id, holding the rows of one id at a
// time and a sum per invoice line: its memory does not grow with the
// period's volume.
func Reconcile(ctx context.Context, tenantID, period string, s Sources) (Report, error) {
	r := &reconciler{period: period, report: Report{TenantID: tenantID, Period: period},
		lines: map[lineKey]*lineSums{}, inScope: map[uuid.UUID]bool{}, issued: map[uuid.UUID]bool{},
		prices: map[priceKey]pricing.Pricing{}, plans: map[planKey]recon.Price{}}
	err := r.readPrices(ctx, s.Prices)
	if err == nil {
		err = r.usagePass(ctx, s)
	}
	if err == nil {
		err = r.adjustmentPass(ctx, s)
	}
	if err == nil {
		err = r.lineTotals(ctx, s.LineTotals)
	}
	if err == nil {
		err = r.invoiceTotals(ctx, s.QueryInvoices)
	}
	if err != nil {
		return Report{}, err
	}
	slices.SortFunc(r.report.Mismatches, func(a, b Mismatch) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.OriginEventID.String(), b.OriginEventID.String()),
			cmp.Compare(a.Detail, b.Detail))
	})
	return r.report, nil
}

type lineKey struct {
	invoice uuid.UUID
	line    string
}

// lineSums are the sums of what an invoice line counts, and the meter's
// aggregation over its charges (catalog.Aggregate; nil while the line
// counts only sum charges, or charges query holds no observation of). A
// unique_count line holds its distinct values: memory grows with a line's
// distinct values, not with its charges.
type lineSums struct {
	quantity, amount decimal.Decimal
	charges          int64
	agg              *catalog.Aggregate
}

// lineQuantity is the line's quantity as its meter aggregates it: the sum
// of its charges' quantities unless they are of another aggregation.
func (m *lineSums) lineQuantity() decimal.Decimal {
	if m.agg == nil {
		return m.quantity
	}
	return m.agg.Quantity()
}

// ChargeObservation is what query's projection of a charge contributes to
// its line's aggregation (ChargeRated's aggregation, quantity, occurredAt,
// identity and value).
type ChargeObservation struct {
	EventID      uuid.UUID // the ChargeRated
	UsageEventID uuid.UUID
	Aggregation  string
	Observation  catalog.Observation
}

// Pos implements recon.Row: by the usage event id it rates, then its own
// (as recon.Charge).
func (c ChargeObservation) Pos() recon.Position {
	return recon.Position{Key: c.UsageEventID, ID: c.EventID}
}

// priceKey names a price version of the tenant, or (plan set) the charge
// of a plan version for a meter and dimension set (catalog.Key).
type planKey struct {
	code    string
	version int64
}

type priceKey struct {
	meter, currency string
	version         int64
	plan, dims      string
}

type reconciler struct {
	prices  map[priceKey]pricing.Pricing // meter's, a few per tenant
	plans   map[planKey]recon.Price      // meter's plan versions, for fee lines
	period  string
	report  Report
	lines   map[lineKey]*lineSums // every line of the invoices read
	inScope map[uuid.UUID]bool    // invoices counting something in scope
	issued  map[uuid.UUID]bool    // issued invoices of the period
	totals  map[uuid.UUID]decimal.Decimal
	bases   map[uuid.UUID]decimal.Decimal // each invoice's lines but its tax and credit lines: its rounded subtotal
	taxes   []recon.LineTotal             // the tax lines in scope, checked once every line is read
	credits map[uuid.UUID]decimal.Decimal // the credit lines in scope, by invoice
}

func (r *reconciler) add(kind string, id uuid.UUID, format string, args ...any) {
	r.report.MismatchCount++
	if len(r.report.Mismatches) < MaxMismatches {
		r.report.Mismatches = append(r.report.Mismatches, Mismatch{Kind: kind, OriginEventID: id, Detail: fmt.Sprintf(format, args...)})
	}
}

// count adds what an invoice line counts (a charge, an adjustment, a
// rounding) to the line's sums, and notes its invoice in scope or issued.
func (r *reconciler) count(l recon.InvoiceLine, scoped bool, obs map[uuid.UUID]ChargeObservation) {
	k := lineKey{l.InvoiceID, l.LineID}
	m := r.lines[k]
	if m == nil {
		m = &lineSums{}
		r.lines[k] = m
	}
	m.amount = m.amount.Add(l.Amount)
	if l.Kind == "charge" || l.Kind == "unpriced" {
		m.quantity = m.quantity.Add(l.Quantity)
		m.charges++
		// The line's aggregation over the quantities invoice counts, with
		// the rest of each charge's observation from query's projection.
		if o, ok := obs[l.OriginEventID]; ok && o.Aggregation != "" && o.Aggregation != catalog.Sum {
			if m.agg == nil {
				m.agg = catalog.NewAggregate(o.Aggregation)
			}
			ob := o.Observation
			ob.Quantity = l.Quantity
			m.agg.Add(ob)
		}
	}
	if l.Period == r.period || scoped {
		r.inScope[l.InvoiceID] = true
	}
	if l.Issued && l.Period == r.period {
		r.issued[l.InvoiceID] = true
	}
}

// readPrices reads meter's price versions of the tenant.
func (r *reconciler) readPrices(ctx context.Context, prices *recon.Stream[recon.Price]) error {
	for {
		p, ok, err := prices.Next(ctx)
		if err != nil || !ok {
			return err
		}
		if p.PlanCode == "" {
			r.prices[priceKey{meter: p.MeterCode, currency: p.Currency, version: p.Version}] = p.Pricing
			continue
		}
		for _, c := range p.Charges {
			r.prices[priceKey{meter: c.MeterCode, currency: p.Currency, version: p.Version, plan: p.PlanCode,
				dims: catalog.Key(c.Dimensions)}] = c.Pricing
		}
		r.plans[planKey{p.PlanCode, p.Version}] = p
	}
}

// usagePass merges usage facts, charges, the charges invoices count and
// query's projection of both by usage event id.
func (r *reconciler) usagePass(ctx context.Context, s Sources) error {
	for {
		streams := []interface {
			PeekKey(context.Context) (uuid.UUID, bool, error)
		}{s.UsageFacts, s.Charges, s.InvoiceCharges, s.QueryUsage, s.QueryCharges}
		if s.QueryObservations != nil {
			streams = append(streams, s.QueryObservations)
		}
		key, ok, err := recon.MinKey(ctx, streams...)
		if err != nil || !ok {
			return err
		}
		var g usageGroup
		if g.facts, err = s.UsageFacts.Take(ctx, key); err != nil {
			return err
		}
		if g.charges, err = s.Charges.Take(ctx, key); err != nil {
			return err
		}
		if g.counted, err = s.InvoiceCharges.Take(ctx, key); err != nil {
			return err
		}
		if g.queryFacts, err = s.QueryUsage.Take(ctx, key); err != nil {
			return err
		}
		if g.queryCharges, err = s.QueryCharges.Take(ctx, key); err != nil {
			return err
		}
		if s.QueryObservations != nil {
			if g.observations, err = s.QueryObservations.Take(ctx, key); err != nil {
				return err
			}
		}
		r.usageGroup(key, g)
	}
}

// usageGroup is what the sources hold of one usage event.
type usageGroup struct {
	facts        []recon.UsageFact
	charges      []recon.Charge // all in scope (billing's set is the period's)
	counted      []recon.InvoiceLine
	queryFacts   []recon.UsageFact
	queryCharges []recon.Charge
	observations []ChargeObservation
}

func (r *reconciler) usageGroup(key uuid.UUID, g usageGroup) {
	billed := map[uuid.UUID]bool{}
	for _, c := range g.charges {
		billed[c.EventID] = true
	}
	fact, known := first(g.facts)
	inScope := known && (fact.Period == r.period || len(g.charges) > 0)
	if inScope {
		r.report.Counts.UsageFacts++
		r.checkFact(fact, g)
	}
	for _, qf := range g.queryFacts {
		if !known && qf.Period == r.period {
			r.add(MismatchUnknownInQuery, qf.EventID, "projected usage fact %s is not in usage", qf.UsageID)
		}
	}
	projected := map[uuid.UUID]decimal.Decimal{}
	for _, qc := range g.queryCharges {
		projected[qc.EventID] = qc.Amount
		if !billed[qc.EventID] && qc.Period == r.period {
			r.add(MismatchUnknownInQuery, qc.EventID, "projected charge is not in billing")
		}
	}
	for _, c := range g.charges {
		r.report.Counts.Charges++
		if !known {
			r.add(MismatchChargeWithoutUsage, c.EventID, "charge rates usage event %s, which usage does not hold", key)
		}
		var lines []recon.InvoiceLine
		for _, l := range g.counted {
			if l.OriginEventID == c.EventID {
				lines = append(lines, l)
			}
		}
		r.chargePeriod(c, lines)
		r.invoiced(c.EventID, "charge", c.Amount, lines, nil)
		r.projected(c.EventID, "charge", c.Amount, projected)
	}
	obs := make(map[uuid.UUID]ChargeObservation, len(g.observations))
	for _, o := range g.observations {
		obs[o.EventID] = o
	}
	for _, l := range g.counted {
		scoped := billed[l.OriginEventID]
		r.count(l, scoped, obs)
		if l.Period == r.period || scoped {
			r.report.Counts.InvoiceLines++
			if !scoped {
				r.add(MismatchLineWithoutOrigin, l.OriginEventID, "%s line of invoice %s has no charge or adjustment in billing", l.Kind, l.InvoiceID)
			}
		}
	}
}

// chargePeriod checks that a charge is in the period it belongs to: the
// period its usage occurred in (billing's calendar of the tenant) unless
// late, a later one if late, and that the invoice counting it is of its
// period.
func (r *reconciler) chargePeriod(c recon.Charge, lines []recon.InvoiceLine) {
	if c.OccurredPeriod != "" && (c.Late && c.Period <= c.OccurredPeriod || !c.Late && c.Period != c.OccurredPeriod) {
		r.add(MismatchChargePeriod, c.EventID, "charge rated into %s (late: %t); its usage occurred in %s", c.Period, c.Late, c.OccurredPeriod)
	}
	for _, l := range lines {
		if l.Period != c.Period {
			r.add(MismatchChargePeriod, c.EventID, "charge of %s is counted by invoice %s of %s", c.Period, l.InvoiceID, l.Period)
		}
	}
}

// checkFact checks an in-scope usage fact's charge and projection.
func (r *reconciler) checkFact(u recon.UsageFact, g usageGroup) {
	switch cs := g.charges; {
	case len(cs) == 0:
		r.add(MismatchMissingCharge, u.EventID, "usage fact %s has no charge", u.UsageID)
	case len(cs) > 1:
		r.add(MismatchDuplicateCharge, u.EventID, "usage fact %s has %d charges", u.UsageID, len(cs))
	case !cs[0].Quantity.Equal(u.Quantity):
		r.add(MismatchAmount, u.EventID, "usage quantity %s, charge %s quantity %s", u.Quantity, cs[0].EventID, cs[0].Quantity)
	}
	qu, ok := first(g.queryFacts)
	switch {
	case !ok:
		r.add(MismatchMissingInQuery, u.EventID, "usage fact %s is not projected", u.UsageID)
	case !qu.Quantity.Equal(u.Quantity):
		r.report.Counts.QueryUsage++
		r.add(MismatchQueryAmount, u.EventID, "usage quantity %s, projected %s", u.Quantity, qu.Quantity)
	default:
		r.report.Counts.QueryUsage++
	}
}

// adjustmentPass merges adjustments, the adjustment and rounding lines and
// correction notes that count them, and query's projection of both, by
// adjustment event id.
func (r *reconciler) adjustmentPass(ctx context.Context, s Sources) error {
	for {
		key, ok, err := recon.MinKey(ctx, s.Adjustments, s.InvoiceLines, s.Corrections, s.QueryAdjustments, s.QueryCorrections)
		if err != nil || !ok {
			return err
		}
		var g adjustmentGroup
		if g.adjustments, err = s.Adjustments.Take(ctx, key); err != nil {
			return err
		}
		if g.lines, err = s.InvoiceLines.Take(ctx, key); err != nil {
			return err
		}
		if g.corrections, err = s.Corrections.Take(ctx, key); err != nil {
			return err
		}
		if g.queryAdjustments, err = s.QueryAdjustments.Take(ctx, key); err != nil {
			return err
		}
		if g.queryCorrections, err = s.QueryCorrections.Take(ctx, key); err != nil {
			return err
		}
		r.adjustmentGroup(g)
	}
}

// adjustmentGroup is what the sources hold of one adjustment (or the
// closing event of a rounding line).
type adjustmentGroup struct {
	adjustments      []recon.Adjustment
	lines            []recon.InvoiceLine
	corrections      []recon.Correction
	queryAdjustments []recon.Adjustment
	queryCorrections []recon.Correction
}

func (r *reconciler) adjustmentGroup(g adjustmentGroup) {
	a, billed := first(g.adjustments)
	var lines []recon.InvoiceLine
	for _, l := range g.lines {
		r.count(l, billed, nil)
		if l.Kind == "rounding" {
			continue
		}
		lines = append(lines, l)
		if l.Period == r.period || billed {
			r.report.Counts.InvoiceLines++
			if !billed {
				r.add(MismatchLineWithoutOrigin, l.OriginEventID, "%s line of invoice %s has no charge or adjustment in billing", l.Kind, l.InvoiceID)
			}
		}
	}
	for _, qa := range g.queryAdjustments {
		if !billed && qa.Period == r.period {
			r.add(MismatchUnknownInQuery, qa.EventID, "projected adjustment is not in billing")
		}
	}
	if !billed {
		return
	}
	r.report.Counts.InvoiceLines += len(g.corrections)
	r.invoiced(a.EventID, "adjustment", a.Amount, lines, g.corrections)
	projected := map[uuid.UUID]decimal.Decimal{}
	for _, qa := range g.queryAdjustments {
		projected[qa.EventID] = qa.Amount
	}
	r.projected(a.EventID, "adjustment", a.Amount, projected)
	for _, c := range g.corrections {
		qc, ok := first(g.queryCorrections)
		switch {
		case !ok:
			r.add(MismatchMissingInQuery, c.OriginEventID, "correction of invoice %s is not projected", c.InvoiceID)
		case !qc.Amount.Equal(c.Amount):
			r.add(MismatchQueryAmount, c.OriginEventID, "correction of invoice %s: %s, projected %s", c.InvoiceID, c.Amount, qc.Amount)
		}
	}
}

func first[T any](s []T) (T, bool) {
	if len(s) == 0 {
		var zero T
		return zero, false
	}
	return s[0], true
}

// invoiced checks that a charge or an adjustment (origin) is invoiced once,
// as a line or a correction note, at its amount.
func (r *reconciler) invoiced(origin uuid.UUID, what string, amount decimal.Decimal, lines []recon.InvoiceLine, corrections []recon.Correction) {
	n := len(lines) + len(corrections)
	switch {
	case n == 0:
		r.add(MismatchMissingInvoiceLine, origin, "%s %s is on no invoice", what, amount)
	case n > 1:
		r.add(MismatchDuplicateInvoiceLine, origin, "%s is invoiced %d times", what, n)
	case len(lines) == 1 && !lines[0].Amount.Equal(amount):
		r.add(MismatchAmount, origin, "%s amount %s, line of invoice %s %s", what, amount, lines[0].InvoiceID, lines[0].Amount)
	case len(corrections) == 1 && !corrections[0].Amount.Equal(amount):
		r.add(MismatchAmount, origin, "%s amount %s, correction of invoice %s %s", what, amount, corrections[0].InvoiceID, corrections[0].Amount)
	}
}

func (r *reconciler) projected(id uuid.UUID, what string, amount decimal.Decimal, projected map[uuid.UUID]decimal.Decimal) {
	got, ok := projected[id]
	switch {
	case !ok:
		r.add(MismatchMissingInQuery, id, "%s is not projected", what)
	case !got.Equal(amount):
		r.add(MismatchQueryAmount, id, "%s amount %s, projected %s", what, amount, got)
	}
}

// lineTotals checks each line of the invoices in scope, as the invoices show
// it, against what it counts: its quantity and charge count are the sums of
// its charges, a charge line's amount is its price version's pricing (as
// meter holds it) over that quantity — under unit pricing also the sum of
// its charges' amounts — and any other line's amount is its origin's. It
// sums the issued invoices' lines.
func (r *reconciler) lineTotals(ctx context.Context, totals *recon.Stream[recon.LineTotal]) error {
	r.totals, r.bases, r.credits = map[uuid.UUID]decimal.Decimal{}, map[uuid.UUID]decimal.Decimal{}, map[uuid.UUID]decimal.Decimal{}
	for {
		t, ok, err := totals.Next(ctx)
		if err != nil {
			return err
		}
		if !ok {
			r.checkTaxLines()
			r.checkCredits()
			return nil
		}
		if t.Kind == lineKindCredit { // after the total: what the invoice's amount due takes off it
			if r.inScope[t.InvoiceID] {
				r.checkCreditLine(t)
			}
			continue
		}
		if r.issued[t.InvoiceID] {
			r.totals[t.InvoiceID] = r.totals[t.InvoiceID].Add(t.Amount)
		}
		if t.Kind != lineKindTax {
			r.bases[t.InvoiceID] = r.bases[t.InvoiceID].Add(t.Amount)
		}
		switch {
		case !r.inScope[t.InvoiceID]:
		case t.Kind == lineKindTax:
			r.taxes = append(r.taxes, t)
		default:
			r.checkLine(t)
		}
	}
}

// The kinds of an invoice's tax lines and credit lines.
const (
	lineKindTax    = "tax"
	lineKindCredit = "credit_applied"
)

// checkCreditLine holds a credit line to what a draw can be: below zero.
func (r *reconciler) checkCreditLine(t recon.LineTotal) {
	if !t.Amount.IsNegative() {
		r.add(MismatchLineTotal, t.InvoiceID, "line %s: a credit of %s, want below zero", t.LineID, t.Amount)
	}
	r.credits[t.InvoiceID] = r.credits[t.InvoiceID].Add(t.Amount)
}

// checkCredits holds each invoice's credit lines to at most its total: a
// draw never takes an invoice below zero.
func (r *reconciler) checkCredits() {
	for id, c := range r.credits {
		if total := r.totals[id]; total.Add(c).IsNegative() {
			r.add(MismatchLineTotal, id, "credits %s take the invoice's total %s below zero", c, total)
		}
	}
}

// checkTaxLines holds each tax line to its rate times its invoice's rounded
// subtotal (the sum of its other lines, the rounding line included),
// rounded half-even to the currency's minor unit (DESIGN.md section 3a).
func (r *reconciler) checkTaxLines() {
	for _, t := range r.taxes {
		if t.TaxRate == nil {
			r.add(MismatchLineTotal, t.InvoiceID, "line %s: a tax line without its rate", t.LineID)
			continue
		}
		base := r.bases[t.InvoiceID]
		want, err := money.Round(t.TaxRate.Mul(base), t.Currency)
		if err != nil || !want.Equal(t.Amount) {
			r.add(MismatchLineTotal, t.InvoiceID, "line %s: amount %s; rate %s x the rounded subtotal %s gives %s (%v)",
				t.LineID, t.Amount, t.TaxRate, base, want, err)
		}
	}
}

func (r *reconciler) checkLine(t recon.LineTotal) {
	if t.Kind == events.FeeKindFixed || t.Kind == events.FeeKindTrueUp {
		r.checkFeeLine(t)
		return
	}
	m := r.lines[lineKey{t.InvoiceID, t.LineID}]
	if m == nil {
		m = &lineSums{}
	}
	wantAmount, unit, quantity := m.amount, true, m.lineQuantity()
	if t.Kind == "unpriced" {
		wantAmount = decimal.Zero
	}
	if t.Kind == "charge" {
		key := priceKey{meter: t.MeterCode, currency: t.Currency, version: t.PriceVersion}
		if t.PlanCode != "" {
			key.plan, key.dims = t.PlanCode, catalog.Key(t.Dimensions)
		}
		p, ok := r.prices[key]
		if !ok {
			r.add(MismatchLineTotal, t.InvoiceID, "line %s: meter holds no %s %s version %d", t.LineID, t.MeterCode, t.Currency, t.PriceVersion)
			return
		}
		// A line of sum or count charges under unit pricing is also the sum
		// of its charges' own amounts; any other line has only its price.
		unit = p.Model == pricing.Unit && (m.agg == nil || catalog.PricedPerCharge(m.agg.Aggregation))
		if priced := p.Amount(quantity); !priced.Equal(t.Amount) {
			r.add(MismatchLineTotal, t.InvoiceID, "line %s: amount %s; its %s pricing over the quantity its charges sum to (%s) gives %s",
				t.LineID, t.Amount, p.Model, quantity, priced)
			return
		}
		wantAmount = t.Amount
		if unit {
			wantAmount = m.amount
		}
	}
	if !wantAmount.Equal(t.Amount) || !quantity.Equal(t.Quantity) || m.charges != t.ChargeCount {
		r.add(MismatchLineTotal, t.InvoiceID, "line %s: quantity %s, %d charges, amount %s; what it counts sums to %s, %d, %s",
			t.LineID, t.Quantity, t.ChargeCount, t.Amount, quantity, m.charges, m.amount)
	}
}

// checkFeeLine holds a fixed-fee line to its plan version's fee prorated
// by the line's days (money.Prorate), and a true-up line to at most its
// version's minimum spend prorated the same way. The days themselves are
// billing's (from the subscriptions) and not checked here.
func (r *reconciler) checkFeeLine(t recon.LineTotal) {
	p, ok := r.plans[planKey{t.PlanCode, t.PlanVersion}]
	if !ok || p.Currency != t.Currency {
		r.add(MismatchLineTotal, t.InvoiceID, "line %s: meter holds no %s plan %s version %d", t.LineID, t.Currency, t.PlanCode, t.PlanVersion)
		return
	}
	if t.Kind == events.FeeKindTrueUp {
		if p.MinimumSpend == nil {
			r.add(MismatchLineTotal, t.InvoiceID, "line %s: plan %s version %d has no minimum spend", t.LineID, t.PlanCode, t.PlanVersion)
			return
		}
		most, err := money.Prorate(*p.MinimumSpend, t.Days, t.PeriodDays, t.Currency)
		if err != nil || t.Amount.Sign() <= 0 || t.Amount.GreaterThan(most) {
			r.add(MismatchLineTotal, t.InvoiceID, "line %s: true-up %s, want more than 0 and at most the minimum spend %s x %d/%d = %s (%v)",
				t.LineID, t.Amount, p.MinimumSpend, t.Days, t.PeriodDays, most, err)
		}
		return
	}
	i := slices.IndexFunc(p.FixedFees, func(f recon.PlanFee) bool { return f.Code == t.FeeCode })
	if i < 0 {
		r.add(MismatchLineTotal, t.InvoiceID, "line %s: plan %s version %d has no fee %q", t.LineID, t.PlanCode, t.PlanVersion, t.FeeCode)
		return
	}
	want, err := money.Prorate(p.FixedFees[i].Amount, t.Days, t.PeriodDays, t.Currency)
	if err != nil || !want.Equal(t.Amount) {
		r.add(MismatchLineTotal, t.InvoiceID, "line %s: amount %s; the fee %s x %d/%d days gives %s (%v)",
			t.LineID, t.Amount, p.FixedFees[i].Amount, t.Days, t.PeriodDays, want, err)
	}
}

// invoiceTotals checks query's projected total of each issued invoice of the
// period against the sum of the invoice's lines.
func (r *reconciler) invoiceTotals(ctx context.Context, projected *recon.Stream[recon.Invoice]) error {
	got := map[uuid.UUID]decimal.Decimal{}
	for {
		p, ok, err := projected.Next(ctx)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		got[p.InvoiceID] = p.Total
	}
	ids := slices.SortedFunc(maps.Keys(r.totals), func(a, b uuid.UUID) int { return cmp.Compare(a.String(), b.String()) })
	for _, id := range ids {
		total, ok := got[id]
		switch {
		case !ok:
			r.add(MismatchMissingInQuery, id, "issued invoice %s is not projected", id)
		case !total.Equal(r.totals[id]):
			r.add(MismatchQueryAmount, id, "invoice %s: lines sum to %s, projected total %s", id, r.totals[id], total)
		}
	}
	return nil
}
