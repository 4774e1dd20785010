package domain

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

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

// Report is the outcome of a reconciliation: empty Mismatches means healthy.
type Report struct {
	TenantID   string
	Period     string
	Counts     Counts
	Mismatches []Mismatch
}

// Sources are the rows each service returned for a reconciliation.
type Sources struct {
	Usage   recon.Rows // UsageFacts
	Billing recon.Rows // Charges, Adjustments
	Invoice recon.Rows // InvoiceLines, LineTotals, Corrections
	Query   recon.Rows // the projection of all of them (issued invoices: Invoices)
}

// ChargeMonths returns the periods and usage months the charges of billing
// rows touch besides period: the usage and invoice rows to read for them.
func ChargeMonths(period string, billing recon.Rows) []string {
	set := map[string]bool{period: true}
	for _, c := range billing.Charges {
		set[c.Period], set[c.OccurredPeriod] = true, true
	}
	delete(set, "")
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
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
// The scope is the usage that occurred in the period, the charges rated into
// it or rating that usage (late usage is rated into a later period), the
// adjustments of the period, and the lines of the period's invoices. The
// sources may hold more rows (of the other periods the scope touches);
// only the scope is checked.
func Reconcile(tenantID, period string, s Sources) Report {
	r := &reconciler{report: Report{TenantID: tenantID, Period: period}}

	facts := map[uuid.UUID]recon.UsageFact{}
	for _, u := range s.Usage.UsageFacts {
		facts[u.EventID] = u
	}
	chargesOf := map[uuid.UUID][]recon.Charge{}
	billed := map[uuid.UUID]bool{} // charges and adjustments
	for _, c := range s.Billing.Charges {
		chargesOf[c.UsageEventID] = append(chargesOf[c.UsageEventID], c)
		billed[c.EventID] = true
	}
	for _, a := range s.Billing.Adjustments {
		billed[a.EventID] = true
	}

	// The scope.
	var usage []recon.UsageFact
	inScope := map[uuid.UUID]bool{}
	for _, u := range s.Usage.UsageFacts {
		if u.Period == period {
			usage, inScope[u.EventID] = append(usage, u), true
		}
	}
	var charges []recon.Charge
	for _, c := range s.Billing.Charges {
		if c.Period == period || inScope[c.UsageEventID] {
			charges = append(charges, c)
			if u, ok := facts[c.UsageEventID]; ok && !inScope[u.EventID] {
				usage, inScope[u.EventID] = append(usage, u), true
			}
		}
	}
	var adjustments []recon.Adjustment
	for _, a := range s.Billing.Adjustments {
		if a.Period == period {
			adjustments = append(adjustments, a)
		}
	}
	scoped := map[uuid.UUID]bool{} // charges and adjustments in scope
	for _, c := range charges {
		scoped[c.EventID] = true
	}
	for _, a := range adjustments {
		scoped[a.EventID] = true
	}
	linesOf := map[uuid.UUID][]recon.InvoiceLine{}
	var lines []recon.InvoiceLine
	for _, l := range s.Invoice.InvoiceLines {
		if l.Kind == "rounding" {
			continue
		}
		linesOf[l.OriginEventID] = append(linesOf[l.OriginEventID], l)
		if l.Period == period || scoped[l.OriginEventID] {
			lines = append(lines, l)
		}
	}
	correctionsOf := map[uuid.UUID][]recon.Correction{}
	for _, c := range s.Invoice.Corrections {
		correctionsOf[c.OriginEventID] = append(correctionsOf[c.OriginEventID], c)
	}

	// Usage -> charge.
	for _, u := range usage {
		cs := chargesOf[u.EventID]
		switch {
		case len(cs) == 0:
			r.add(MismatchMissingCharge, u.EventID, "usage fact %s has no charge", u.UsageID)
		case len(cs) > 1:
			r.add(MismatchDuplicateCharge, u.EventID, "usage fact %s has %d charges", u.UsageID, len(cs))
		case !cs[0].Quantity.Equal(u.Quantity):
			r.add(MismatchAmount, u.EventID, "usage quantity %s, charge %s quantity %s", u.Quantity, cs[0].EventID, cs[0].Quantity)
		}
	}
	// Charge -> usage, charge and adjustment -> invoice line.
	for _, c := range charges {
		if _, ok := facts[c.UsageEventID]; !ok {
			r.add(MismatchChargeWithoutUsage, c.EventID, "charge rates usage event %s, which usage does not hold", c.UsageEventID)
		}
		r.invoiced(c.EventID, "charge", c.Amount, linesOf[c.EventID], nil)
	}
	for _, a := range adjustments {
		r.invoiced(a.EventID, "adjustment", a.Amount, linesOf[a.EventID], correctionsOf[a.EventID])
	}
	// Invoice line -> charge or adjustment.
	for _, l := range lines {
		if !billed[l.OriginEventID] {
			r.add(MismatchLineWithoutOrigin, l.OriginEventID, "%s line of invoice %s has no charge or adjustment in billing", l.Kind, l.InvoiceID)
		}
	}
	invoicedLines := len(lines)
	for _, a := range adjustments {
		invoicedLines += len(correctionsOf[a.EventID])
	}

	// The query projection.
	q := s.Query
	qUsage := map[uuid.UUID]recon.UsageFact{}
	for _, u := range q.UsageFacts {
		qUsage[u.EventID] = u
	}
	queryUsage := 0
	for _, u := range usage {
		qu, ok := qUsage[u.EventID]
		switch {
		case !ok:
			r.add(MismatchMissingInQuery, u.EventID, "usage fact %s is not projected", u.UsageID)
		case !qu.Quantity.Equal(u.Quantity):
			queryUsage++
			r.add(MismatchQueryAmount, u.EventID, "usage quantity %s, projected %s", u.Quantity, qu.Quantity)
		default:
			queryUsage++
		}
	}
	for _, u := range q.UsageFacts {
		if _, ok := facts[u.EventID]; !ok && u.Period == period {
			r.add(MismatchUnknownInQuery, u.EventID, "projected usage fact %s is not in usage", u.UsageID)
		}
	}
	qMoney := map[uuid.UUID]decimal.Decimal{}
	for _, c := range q.Charges {
		qMoney[c.EventID] = c.Amount
	}
	for _, a := range q.Adjustments {
		qMoney[a.EventID] = a.Amount
	}
	for _, c := range charges {
		r.projected(c.EventID, "charge", c.Amount, qMoney)
	}
	for _, a := range adjustments {
		r.projected(a.EventID, "adjustment", a.Amount, qMoney)
	}
	for _, c := range q.Charges {
		if !billed[c.EventID] && c.Period == period {
			r.add(MismatchUnknownInQuery, c.EventID, "projected charge is not in billing")
		}
	}
	for _, a := range q.Adjustments {
		if !billed[a.EventID] && a.Period == period {
			r.add(MismatchUnknownInQuery, a.EventID, "projected adjustment is not in billing")
		}
	}
	r.lineTotals(s.Invoice, scoped, period)
	r.invoiceTotals(s.Invoice, q.Invoices, period)
	qCorrections := map[uuid.UUID]decimal.Decimal{}
	for _, c := range q.Corrections {
		qCorrections[c.OriginEventID] = c.Amount
	}
	for _, a := range adjustments {
		for _, c := range correctionsOf[a.EventID] {
			amount, ok := qCorrections[c.OriginEventID]
			switch {
			case !ok:
				r.add(MismatchMissingInQuery, c.OriginEventID, "correction of invoice %s is not projected", c.InvoiceID)
			case !amount.Equal(c.Amount):
				r.add(MismatchQueryAmount, c.OriginEventID, "correction of invoice %s: %s, projected %s", c.InvoiceID, c.Amount, amount)
			}
		}
	}

	r.report.Counts = Counts{UsageFacts: len(usage), Charges: len(charges), InvoiceLines: invoicedLines, QueryUsage: queryUsage}
	slices.SortFunc(r.report.Mismatches, func(a, b Mismatch) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.OriginEventID.String(), b.OriginEventID.String()),
			cmp.Compare(a.Detail, b.Detail))
	})
	return r.report
}

type reconciler struct{ report Report }

func (r *reconciler) add(kind string, id uuid.UUID, format string, args ...any) {
	r.report.Mismatches = append(r.report.Mismatches, Mismatch{Kind: kind, OriginEventID: id, Detail: fmt.Sprintf(format, args...)})
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

// lineTotals checks each aggregated line of the period's invoices against
// the sums of the origin rows it counts.
func (r *reconciler) lineTotals(inv recon.Rows, scoped map[uuid.UUID]bool, period string) {
	type key struct {
		invoice uuid.UUID
		line    string
	}
	type sums struct {
		quantity, amount decimal.Decimal
		charges          int64
	}
	members := map[key]*sums{}
	invoiceInScope := map[uuid.UUID]bool{}
	for _, l := range inv.InvoiceLines {
		k := key{l.InvoiceID, l.LineID}
		m := members[k]
		if m == nil {
			m = &sums{}
			members[k] = m
		}
		m.amount = m.amount.Add(l.Amount)
		if l.Kind == "charge" {
			m.quantity = m.quantity.Add(l.Quantity)
			m.charges++
		}
		if l.Period == period || scoped[l.OriginEventID] {
			invoiceInScope[l.InvoiceID] = true
		}
	}
	for _, t := range inv.LineTotals {
		if !invoiceInScope[t.InvoiceID] {
			continue
		}
		m := members[key{t.InvoiceID, t.LineID}]
		if m == nil {
			m = &sums{}
		}
		if !m.amount.Equal(t.Amount) || !m.quantity.Equal(t.Quantity) || m.charges != t.ChargeCount {
			r.add(MismatchLineTotal, t.InvoiceID, "line %s: quantity %s, %d charges, amount %s; what it counts sums to %s, %d, %s",
				t.LineID, t.Quantity, t.ChargeCount, t.Amount, m.quantity, m.charges, m.amount)
		}
	}
}

// invoiceTotals checks query's projected total of each issued invoice of the
// period against the sum of the invoice's lines.
func (r *reconciler) invoiceTotals(inv recon.Rows, projected []recon.Invoice, period string) {
	issued := map[uuid.UUID]bool{}
	for _, l := range inv.InvoiceLines {
		if l.Issued && l.Period == period {
			issued[l.InvoiceID] = true
		}
	}
	totals := map[uuid.UUID]decimal.Decimal{}
	for _, t := range inv.LineTotals {
		if issued[t.InvoiceID] {
			totals[t.InvoiceID] = totals[t.InvoiceID].Add(t.Amount)
		}
	}
	got := map[uuid.UUID]decimal.Decimal{}
	for _, p := range projected {
		got[p.InvoiceID] = p.Total
	}
	ids := make([]uuid.UUID, 0, len(totals))
	for id := range totals {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return cmp.Compare(a.String(), b.String()) })
	for _, id := range ids {
		total, ok := got[id]
		switch {
		case !ok:
			r.add(MismatchMissingInQuery, id, "issued invoice %s is not projected", id)
		case !total.Equal(totals[id]):
			r.add(MismatchQueryAmount, id, "invoice %s: lines sum to %s, projected total %s", id, totals[id], total)
		}
	}
}
