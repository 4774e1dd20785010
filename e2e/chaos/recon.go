package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
)

// Finding is one disagreement, named by the id it is about.
type Finding struct {
	ID     string
	Detail string
}

// Reconciliation is the result of comparing the five databases by origin
// event id for a set of tenants.
type Reconciliation struct {
	Tenants []string
	// Lost: an origin with no effect where one is due (an accepted usage
	// fact without its charge, a charge without its invoice charge, an
	// event missing from query's projection, ...).
	Lost []Finding
	// Duplicated: an origin with more than one effect, or an effect with
	// no origin (a second charge for one usage fact, an invoice charge or
	// line whose origin does not exist, ...).
	Duplicated []Finding
	// Mismatch: an effect that exists once but says something else than
	// its origin (amount, price version, totals), or a broken invariant
	// that is neither a loss nor a duplicate.
	Mismatch []Finding
	// Counts of what was compared. InvoiceCharges are invoice's copies of
	// the charges; InvoiceLines its lines of every kind.
	Facts, Charges, Adjustments, InvoiceCharges, InvoiceLines, Invoices, Projected, Prices int
	// ByVersion counts the charges by the price version that priced
	// them.
	ByVersion map[int64]int
}

// OK reports whether nothing disagrees.
func (r *Reconciliation) OK() bool {
	return len(r.Lost) == 0 && len(r.Duplicated) == 0 && len(r.Mismatch) == 0
}

// Err returns nil when nothing disagrees, else an error listing every
// disagreement with its id (the first 25 of each kind).
func (r *Reconciliation) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "reconciliation of %s failed: %d lost, %d duplicated, %d mismatched",
		strings.Join(r.Tenants, ","), len(r.Lost), len(r.Duplicated), len(r.Mismatch))
	list := func(kind string, fs []Finding) {
		for i, f := range fs {
			if i == 25 {
				fmt.Fprintf(&b, "\n  %s: ... %d more", kind, len(fs)-25)
				break
			}
			fmt.Fprintf(&b, "\n  %s %s: %s", kind, f.ID, f.Detail)
		}
	}
	list("LOST", r.Lost)
	list("DUPLICATED", r.Duplicated)
	list("MISMATCH", r.Mismatch)
	return fmt.Errorf("%s", b.String())
}

func (r *Reconciliation) lost(id, format string, args ...any) {
	r.Lost = append(r.Lost, Finding{id, fmt.Sprintf(format, args...)})
}
func (r *Reconciliation) dup(id, format string, args ...any) {
	r.Duplicated = append(r.Duplicated, Finding{id, fmt.Sprintf(format, args...)})
}
func (r *Reconciliation) mismatch(id, format string, args ...any) {
	r.Mismatch = append(r.Mismatch, Finding{id, fmt.Sprintf(format, args...)})
}

// Reconcile compares, for tenants, what the client was answered (ledger)
// with the five databases, by origin event id:
//
//   - meter's price versions are replicated once each into usage's and
//     billing's price evidence and query's projection;
//   - every usage fact the client saw accepted is in usage's database,
//     as sent, priced by the version effective at its occurredAt (from
//     meter's price table), and nothing else is;
//   - every usage fact has exactly one charge (quantity x the unit price
//     of that version, in the period it occurred in), and every charge
//     rates a usage fact;
//   - every adjustment the client posted exists once;
//   - every billing event is version 1 of its own aggregate (a charge, an
//     adjustment, a period's close), and every closed period has its close;
//   - every charge is exactly one invoice_charge row in invoice (same
//     tenant, period, currency, meter, price version, quantity, amount),
//     and invoice holds none that billing did not rate;
//   - each issued invoice's charge lines are the GROUP BY (meter, price
//     version) of its invoice charges: quantity, charge count and amount
//     the sums, amount = quantity x unit price; each adjustment the close
//     counted is exactly one adjustment line, each adjustment posted after
//     the close exactly one correction note; subtotal = the charge and
//     adjustment lines = billing's charges and counted adjustments, total
//     = subtotal rounded half-even = subtotal + the rounding line;
//   - invoice numbers are 1..n per tenant, without a gap or a repeat;
//   - query projects every one of those events once (an issued invoice
//     as its InvoiceIssued, with the invoice's total), and its totals (the
//     folded totals plus the deltas not yet folded, as a summary read
//     folds them) equal the same sums;
//   - each service wrote every event of an effect into its outbox with
//     the effect, and none without (nothing half-written).
func Reconcile(ctx context.Context, db map[string]*pgxpool.Pool, tenants []string, ledger *Ledger) (*Reconciliation, error) {
	s, err := readSnapshot(ctx, db, tenants)
	if err != nil {
		return nil, err
	}
	rc := newReconciler(tenants, ledger, s)
	rc.prices()
	rc.usageFacts()
	rc.usageToCharges()
	rc.adjustmentsPosted()
	rc.billingVersions()
	rc.chargesToInvoice()
	rc.invoiceLines()
	if err := rc.invoiceTotals(); err != nil {
		return nil, err
	}
	rc.invoiceNumbers()
	rc.queryProjection()
	rc.queryTotals()
	rc.outbox()
	r := rc.r
	sortFindings(r.Lost)
	sortFindings(r.Duplicated)
	sortFindings(r.Mismatch)
	return r, nil
}

// reconciler holds what the checks share: the snapshot, the ledger's
// records, indexes of the rows by id, and the outbox rows each effect
// calls for.
type reconciler struct {
	r       *Reconciliation
	s       *snapshot
	tenants []string

	ledgerPrices      []PriceRecord
	ledgerAdjustments []AdjustmentRecord
	ledgerFacts       []*Fact

	priceByEvent   map[string]priceRow
	schedule       map[string][]priceRow // tenant/meter/currency -> versions ascending
	factByEvent    map[string]factRow
	chargeByEvent  map[string]chargeRow
	adjByEvent     map[string]adjustmentRow
	invoiceByID    map[string]invoiceRow
	invoiceOf      map[string]invoiceRow // tenant/period/currency
	invoiceCharges map[string]invoiceChargeRow

	// outboxWant: service -> "type/event id" -> the effect that calls for it.
	outboxWant map[string]map[string]string
}

func newReconciler(tenants []string, ledger *Ledger, s *snapshot) *reconciler {
	return newReconcilerOf(tenants, ledger, s, true)
}

// newReconcilerOf is newReconciler; withFacts false leaves out the copy of
// the ledger's facts (ReconcileStream walks them in place).
func newReconcilerOf(tenants []string, ledger *Ledger, s *snapshot, withFacts bool) *reconciler {
	rc := &reconciler{
		r: &Reconciliation{Tenants: tenants, ByVersion: map[int64]int{},
			Facts: len(s.facts), Charges: len(s.charges), Adjustments: len(s.adjustments), InvoiceCharges: len(s.invoiceCharges),
			InvoiceLines: len(s.lines), Invoices: len(s.invoices), Projected: len(s.projected), Prices: len(s.prices)},
		s: s, tenants: tenants,
		priceByEvent: map[string]priceRow{}, schedule: map[string][]priceRow{},
		factByEvent: map[string]factRow{}, chargeByEvent: map[string]chargeRow{}, adjByEvent: map[string]adjustmentRow{},
		invoiceByID: map[string]invoiceRow{}, invoiceOf: map[string]invoiceRow{}, invoiceCharges: map[string]invoiceChargeRow{},
		outboxWant: map[string]map[string]string{},
	}
	ledger.mu.Lock()
	rc.ledgerPrices = slices.Clone(ledger.Prices)
	rc.ledgerAdjustments = slices.Clone(ledger.Adjustments)
	ledger.mu.Unlock()
	if withFacts {
		rc.ledgerFacts = ledger.Facts(tenants...)
	}
	for _, p := range s.prices {
		rc.priceByEvent[p.EventID] = p
		k := p.Tenant + "/" + p.Meter + "/" + p.Currency
		rc.schedule[k] = append(rc.schedule[k], p)
	}
	for _, ss := range rc.schedule {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Version < ss[j].Version })
	}
	for _, f := range s.facts {
		rc.factByEvent[f.EventID] = f
	}
	for _, c := range s.charges {
		rc.chargeByEvent[c.EventID] = c
	}
	for _, a := range s.adjustments {
		rc.adjByEvent[a.EventID] = a
	}
	for _, inv := range s.invoices {
		rc.invoiceByID[inv.InvoiceID] = inv
		rc.invoiceOf[invoiceKey(inv.Tenant, inv.Period, inv.Currency)] = inv
	}
	for _, c := range s.invoiceCharges {
		rc.invoiceCharges[c.OriginEventID] = c
	}
	return rc
}

func invoiceKey(tenant, period, currency string) string {
	return tenant + "/" + period + "/" + currency
}

// want records that service's outbox must hold the event eventType/id,
// written with the effect what.
func (rc *reconciler) want(service, eventType, id, what string) {
	if rc.outboxWant[service] == nil {
		rc.outboxWant[service] = map[string]string{}
	}
	rc.outboxWant[service][eventType+"/"+id] = what
}

func (rc *reconciler) mine(tenant string) bool { return slices.Contains(rc.tenants, tenant) }

// priceAt is the version of tenant's meter in effect at.
func (rc *reconciler) priceAt(tenant, meter, currency string, at time.Time) (priceRow, bool) {
	ss := rc.schedule[tenant+"/"+meter+"/"+currency]
	for i := len(ss) - 1; i >= 0; i-- {
		if !ss[i].EffectiveAt.After(at) {
			return ss[i], true
		}
	}
	return priceRow{}, false
}

// priceVersion is version v of tenant's meter.
func (rc *reconciler) priceVersion(tenant, meter, currency string, v int64) (priceRow, bool) {
	for _, p := range rc.schedule[tenant+"/"+meter+"/"+currency] {
		if p.Version == v {
			return p, true
		}
	}
	return priceRow{}, false
}

// prices: meter holds what the client activated, and usage and billing
// hold each version once as evidence.
func (rc *reconciler) prices() {
	r := rc.r
	for _, p := range rc.s.prices {
		rc.want("meter", events.TypePriceActivated, p.EventID, "price "+p.Tenant+"/"+p.Meter+"/"+p.Currency)
	}
	for _, lp := range rc.ledgerPrices {
		if !rc.mine(lp.Tenant) {
			continue
		}
		p, ok := rc.priceByEvent[lp.EventID]
		switch {
		case !ok:
			r.lost(lp.EventID, "price %s %s v%d of %s was activated (201) but is not in meter's price table", lp.Meter, lp.Currency, lp.Version, lp.Tenant)
		case p.Version != lp.Version || !p.UnitPrice.Equal(lp.UnitPrice) || !p.EffectiveAt.Equal(lp.EffectiveAt):
			r.mismatch(lp.EventID, "price %s v%d of %s: meter holds v%d %s from %s, the client was answered v%d %s from %s",
				lp.Meter, lp.Version, lp.Tenant, p.Version, p.UnitPrice, p.EffectiveAt, lp.Version, lp.UnitPrice, lp.EffectiveAt)
		}
	}
	for _, service := range []string{"usage", "billing"} {
		ev := rc.s.evidence[service]
		for _, p := range rc.s.prices {
			e, ok := ev[p.EventID]
			switch {
			case !ok:
				r.lost(p.EventID, "price %s %s v%d of %s (PriceActivated) is not in %s's price evidence", p.Meter, p.Currency, p.Version, p.Tenant, service)
			case e.Version != p.Version || !e.UnitPrice.Equal(p.UnitPrice) || !e.EffectiveAt.Equal(p.EffectiveAt) || e.Meter != p.Meter:
				r.mismatch(p.EventID, "%s's evidence of %s v%d says %s v%d %s from %s; meter: %s v%d %s from %s", service, p.Meter, p.Version,
					e.Meter, e.Version, e.UnitPrice, e.EffectiveAt, p.Meter, p.Version, p.UnitPrice, p.EffectiveAt)
			}
		}
		for id, e := range ev {
			if _, ok := rc.priceByEvent[id]; !ok {
				r.dup(id, "%s holds price evidence %s v%d of %s from event %s, which meter never activated", service, e.Meter, e.Version, e.Tenant, id)
			}
		}
	}
}

// usageFacts: usage holds every fact the client saw accepted, as sent,
// priced by the version in effect at its occurredAt, and nothing else.
func (rc *reconciler) usageFacts() {
	r := rc.r
	factByIdentity := map[string]factRow{}
	for _, f := range rc.s.facts {
		factByIdentity[f.Tenant+"|"+f.SourceEventID] = f
		rc.want("usage", events.TypeUsageAccepted, f.EventID, "usage fact "+f.UsageID)
	}
	sent := map[string]*Fact{}
	for _, lf := range rc.ledgerFacts {
		sent[lf.Tenant+"|"+lf.SourceEventID] = lf
		f, ok := factByIdentity[lf.Tenant+"|"+lf.SourceEventID]
		switch {
		case lf.Accepted && !ok:
			r.lost(lf.EventID, "usage fact %s/%s was accepted (usage %s) but is not in usage's database", lf.Tenant, lf.SourceEventID, lf.UsageID)
		case lf.Accepted && (f.UsageID != lf.UsageID || f.EventID != lf.EventID):
			r.mismatch(f.EventID, "usage fact %s/%s: database has usage %s event %s, the client was answered usage %s event %s",
				lf.Tenant, lf.SourceEventID, f.UsageID, f.EventID, lf.UsageID, lf.EventID)
		}
		if ok && (f.Meter != lf.Meter || !f.Quantity.Equal(lf.Quantity) || !f.OccurredAt.Equal(lf.OccurredAt) || f.SourceSystem != SourceSystem) {
			r.mismatch(f.EventID, "usage fact %s/%s holds %s %s at %s, sent %s %s at %s", lf.Tenant, lf.SourceEventID,
				f.Meter, f.Quantity, f.OccurredAt, lf.Meter, lf.Quantity, lf.OccurredAt)
		}
	}
	for _, f := range rc.s.facts {
		lf, ok := sent[f.Tenant+"|"+f.SourceEventID]
		switch {
		case !ok:
			r.dup(f.EventID, "usage fact %s (%s/%s/%s) was never sent", f.UsageID, f.Tenant, f.SourceSystem, f.SourceEventID)
		case !lf.Accepted && !lf.Unresolved:
			r.mismatch(f.EventID, "usage fact %s/%s is in usage's database, but its request was never answered as accepted", f.Tenant, f.SourceEventID)
		}
		if _, ok := rc.priceAt(f.Tenant, f.Meter, f.Currency, f.OccurredAt); !ok {
			r.mismatch(f.EventID, "usage fact %s (%s at %s) has no %s price in effect in meter's table", f.UsageID, f.Meter, f.OccurredAt, f.Currency)
		}
	}
}

// usageToCharges: exactly one charge per usage fact, at quantity x the
// unit price of the fact's version, in the period it occurred in; no
// charge without a fact.
func (rc *reconciler) usageToCharges() {
	r := rc.r
	chargesOf := map[string][]chargeRow{}
	for _, c := range rc.s.charges {
		chargesOf[c.UsageEventID] = append(chargesOf[c.UsageEventID], c)
		rc.want("billing", events.TypeChargeRated, c.EventID, "charge "+c.ChargeID)
	}
	for _, f := range rc.s.facts {
		cs := chargesOf[f.EventID]
		switch len(cs) {
		case 0:
			r.lost(f.EventID, "usage fact %s (%s/%s) has no charge", f.UsageID, f.Tenant, f.SourceEventID)
			continue
		case 1:
		default:
			var ids []string
			for _, c := range cs {
				ids = append(ids, c.ChargeID)
			}
			r.dup(f.EventID, "usage fact %s (%s/%s) has %d charges: %s", f.UsageID, f.Tenant, f.SourceEventID, len(cs), strings.Join(ids, ", "))
		}
		for _, c := range cs {
			rc.chargeRatesFact(c, f)
		}
	}
	for _, c := range rc.s.charges {
		if _, ok := rc.factByEvent[c.UsageEventID]; !ok {
			r.dup(c.UsageEventID, "charge %s (event %s) rates usage event %s, which is no usage fact", c.ChargeID, c.EventID, c.UsageEventID)
		}
	}
}

// chargeRatesFact checks one charge against the fact it rates.
func (rc *reconciler) chargeRatesFact(c chargeRow, f factRow) {
	rc.r.ByVersion[c.PriceVersion]++
	p, ok := rc.priceVersion(c.Tenant, c.Meter, c.Currency, c.PriceVersion)
	inEffect, known := rc.priceAt(f.Tenant, f.Meter, f.Currency, f.OccurredAt)
	switch {
	case c.Tenant != f.Tenant || c.UsageID != f.UsageID || c.Meter != f.Meter || c.Currency != f.Currency ||
		!c.Quantity.Equal(f.Quantity):
		rc.r.mismatch(c.ChargeID, "charge %s of usage event %s: %s %s %s, the fact: %s %s %s", c.ChargeID, f.EventID,
			c.Meter, c.Quantity, c.Currency, f.Meter, f.Quantity, f.Currency)
	case known && c.PriceVersion != inEffect.Version:
		rc.r.mismatch(c.ChargeID, "charge %s of usage %s (%s at %s) priced by version %d; the version in effect then is %d (from %s)",
			c.ChargeID, f.UsageID, f.Meter, f.OccurredAt.Format(time.RFC3339Nano), c.PriceVersion, inEffect.Version,
			inEffect.EffectiveAt.Format(time.RFC3339Nano))
	case !ok || !c.UnitPrice.Equal(p.UnitPrice):
		rc.r.mismatch(c.ChargeID, "charge %s at unit price %s, meter's %s v%d is %s", c.ChargeID, c.UnitPrice, c.Meter, c.PriceVersion, p.UnitPrice)
	case !c.Amount.Equal(c.Quantity.Mul(c.UnitPrice)):
		rc.r.mismatch(c.ChargeID, "charge %s: amount %s, quantity %s x unit price %s = %s", c.ChargeID, c.Amount, c.Quantity, c.UnitPrice, c.Quantity.Mul(c.UnitPrice))
	case c.Late || c.Period != events.Period(f.OccurredAt):
		rc.r.mismatch(c.ChargeID, "charge %s rated into %s (late %v); the usage occurred in %s, before its period closed",
			c.ChargeID, c.Period, c.Late, events.Period(f.OccurredAt))
	}
}

// adjustmentsPosted: every adjustment the client posted exists once, as
// posted; none that it did not post.
func (rc *reconciler) adjustmentsPosted() {
	r := rc.r
	for _, a := range rc.s.adjustments {
		rc.want("billing", events.TypeAdjustmentPosted, a.EventID, "adjustment "+a.AdjustmentID)
	}
	posted := map[string]bool{}
	for _, la := range rc.ledgerAdjustments {
		if !rc.mine(la.Tenant) {
			continue
		}
		posted[la.EventID] = true
		a, ok := rc.adjByEvent[la.EventID]
		switch {
		case !ok:
			r.lost(la.EventID, "adjustment %s of %s was posted (201) but is not in billing's database", la.AdjustmentID, la.Tenant)
		case !a.Amount.Equal(la.Amount) || a.Currency != la.Currency || a.CorrectionOf != la.CorrectionOf:
			r.mismatch(la.EventID, "adjustment %s: %s %s on %s, posted %s %s on %s", a.AdjustmentID, a.Amount, a.Currency, a.CorrectionOf,
				la.Amount, la.Currency, la.CorrectionOf)
		}
	}
	for _, a := range rc.s.adjustments {
		if !posted[a.EventID] {
			r.dup(a.EventID, "adjustment %s of %s was never posted by the client", a.AdjustmentID, a.Tenant)
		}
	}
}

// billingVersions: every ChargeRated, AdjustmentPosted and
// BillingPeriodClosed in billing's outbox is version 1 of its own
// aggregate (charge/<chargeId>, adjustment/<id>, billing_period/<period>),
// and no two events share an aggregate. Every closed period has its close.
func (rc *reconciler) billingVersions() {
	r := rc.r
	closeOf := map[string]periodRow{}
	for _, p := range rc.s.periods {
		if p.Status != "closed" {
			continue
		}
		if p.CloseEventID == "" {
			r.lost(p.Tenant+"/"+p.Period, "billing period %s of %s is closed without a close event", p.Period, p.Tenant)
			continue
		}
		closeOf[p.CloseEventID] = p
		rc.want("billing", events.TypeBillingPeriodClosed, p.CloseEventID, "close of "+p.Tenant+"/"+p.Period)
	}
	owner := map[string]string{} // tenant's aggregate type/id -> the event holding it
	for _, e := range rc.s.billingEnvelope {
		var aggType, aggID string
		switch e.EventType {
		case events.TypeChargeRated:
			aggType = events.AggregateCharge
			if c, ok := rc.chargeByEvent[e.EventID]; ok {
				aggID = c.ChargeID
			}
		case events.TypeAdjustmentPosted:
			aggType = events.AggregateAdjustment
			if a, ok := rc.adjByEvent[e.EventID]; ok {
				aggID = a.AdjustmentID
			}
		case events.TypeBillingPeriodClosed:
			aggType = events.AggregateBillingPeriod
			if p, ok := closeOf[e.EventID]; ok {
				aggID = p.Period
			}
		default:
			continue
		}
		agg := e.AggregateType + "/" + e.AggregateID
		switch {
		case e.AggregateVersion != 1:
			r.mismatch(e.EventID, "billing's %s %s is version %d of %s, want version 1 of its own aggregate", e.EventType, e.EventID, e.AggregateVersion, agg)
		case e.AggregateType != aggType || (aggID != "" && e.AggregateID != aggID):
			// aggID is empty for an event without its effect: outbox()
			// names it half-written.
			r.mismatch(e.EventID, "billing's %s %s is of aggregate %s, want %s/%s", e.EventType, e.EventID, agg, aggType, aggID)
		}
		if prev, ok := owner[e.Tenant+"|"+agg]; ok {
			r.dup(e.EventID, "billing's %s %s and %s are both of %s's aggregate %s", e.EventType, prev, e.EventID, e.Tenant, agg)
		}
		owner[e.Tenant+"|"+agg] = e.EventID
	}
}

// chargesToInvoice: every charge of billing is exactly one invoice_charge
// row in invoice with the same figures, and invoice holds none that
// billing did not rate. (origin_event_id is invoice_charge's primary key:
// one row per ChargeRated at most.)
func (rc *reconciler) chargesToInvoice() {
	r := rc.r
	for _, c := range rc.s.charges {
		ic, ok := rc.invoiceCharges[c.EventID]
		switch {
		case !ok:
			r.lost(c.EventID, "charge %s (ChargeRated %s, %s %s %s) is not in invoice's charges", c.ChargeID, c.EventID, c.Tenant, c.Period, c.Amount)
		case ic.ChargeID != c.ChargeID || ic.Tenant != c.Tenant || ic.Period != c.Period || ic.Currency != c.Currency ||
			ic.Meter != c.Meter || ic.PriceVersion != c.PriceVersion || !ic.UnitPrice.Equal(c.UnitPrice) ||
			!ic.Quantity.Equal(c.Quantity) || !ic.Amount.Equal(c.Amount):
			r.mismatch(c.EventID, "invoice's copy of charge %s (ChargeRated %s): %s %s %s %s v%d %s x %s = %s; billing: %s %s %s %s v%d %s x %s = %s",
				c.ChargeID, c.EventID, ic.Tenant, ic.Period, ic.Currency, ic.Meter, ic.PriceVersion, ic.Quantity, ic.UnitPrice, ic.Amount,
				c.Tenant, c.Period, c.Currency, c.Meter, c.PriceVersion, c.Quantity, c.UnitPrice, c.Amount)
		}
	}
	for _, ic := range rc.s.invoiceCharges {
		if _, ok := rc.chargeByEvent[ic.OriginEventID]; !ok {
			r.dup(ic.OriginEventID, "invoice holds charge %s of ChargeRated %s (%s %s %s), which billing never rated",
				ic.ChargeID, ic.OriginEventID, ic.Tenant, ic.Period, ic.Amount)
		}
	}
}

// lineKey names one charge line: an invoice, a meter and a price version.
type lineKey struct {
	invoice, meter string
	version        int64
}

func (k lineKey) String() string { return fmt.Sprintf("%s/%s/v%d", k.invoice, k.meter, k.version) }

// chargeGroup is the GROUP BY of invoice charges behind one charge line.
type chargeGroup struct {
	quantity, amount decimal.Decimal
	count            int64
	unitPrices       map[string]bool
}

// invoiceLines: each issued invoice's charge lines are the GROUP BY of
// its invoice charges; each adjustment the close counted is exactly one
// adjustment line, each adjustment posted after the close exactly one
// correction note; no line or note without its origin.
func (rc *reconciler) invoiceLines() {
	rc.chargeLines()
	rc.adjustmentLines()
}

func (rc *reconciler) chargeLines() {
	r := rc.r
	groups := map[lineKey]*chargeGroup{}
	for _, ic := range rc.s.invoiceCharges {
		inv, ok := rc.invoiceOf[invoiceKey(ic.Tenant, ic.Period, ic.Currency)]
		if !ok || inv.Status != "issued" {
			continue // invoiceTotals names the invoice missing or not issued
		}
		k := lineKey{inv.InvoiceID, ic.Meter, ic.PriceVersion}
		g := groups[k]
		if g == nil {
			g = &chargeGroup{unitPrices: map[string]bool{}}
			groups[k] = g
		}
		g.quantity, g.amount, g.count = g.quantity.Add(ic.Quantity), g.amount.Add(ic.Amount), g.count+1
		g.unitPrices[ic.UnitPrice.String()] = true
	}
	seen := map[lineKey]int{}
	for _, l := range rc.s.lines {
		if l.Kind != "charge" {
			continue
		}
		k := lineKey{l.InvoiceID, l.Meter, l.PriceVersion}
		seen[k]++
		inv := rc.invoiceByID[l.InvoiceID]
		g, ok := groups[k]
		switch {
		case inv.Status != "issued":
			r.mismatch(k.String(), "invoice %s is %q but holds the charge line %s", l.InvoiceID, inv.Status, k)
		case !ok:
			r.dup(k.String(), "invoice %s has a charge line for %s v%d (%s, %d charges, %s), which no invoice charge of it counts",
				l.InvoiceID, l.Meter, l.PriceVersion, l.Quantity, l.ChargeCount, l.Amount)
		case !l.Quantity.Equal(g.quantity) || l.ChargeCount != g.count || !l.Amount.Equal(g.amount):
			r.mismatch(k.String(), "charge line %s: quantity %s, %d charges, amount %s; its invoice charges sum to %s, %d charges, %s",
				k, l.Quantity, l.ChargeCount, l.Amount, g.quantity, g.count, g.amount)
		case len(g.unitPrices) != 1 || !g.unitPrices[l.UnitPrice.String()]:
			r.mismatch(k.String(), "charge line %s at unit price %s; its charges are at %s", k, l.UnitPrice,
				strings.Join(slices.Sorted(maps.Keys(g.unitPrices)), ", "))
		case !l.Amount.Equal(l.Quantity.Mul(l.UnitPrice)):
			r.mismatch(k.String(), "charge line %s: amount %s, quantity %s x unit price %s = %s", k, l.Amount, l.Quantity, l.UnitPrice,
				l.Quantity.Mul(l.UnitPrice))
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(groups), func(a, b lineKey) int { return strings.Compare(a.String(), b.String()) }) {
		switch n := seen[k]; {
		case n == 0:
			r.lost(k.String(), "invoice %s has no charge line for its %d charges of %s v%d", k.invoice, groups[k].count, k.meter, k.version)
		case n > 1:
			r.dup(k.String(), "invoice %s has %d charge lines for %s v%d", k.invoice, n, k.meter, k.version)
		}
	}
}

func (rc *reconciler) adjustmentLines() {
	r := rc.r
	linesOf, notesOf := map[string][]lineRow{}, map[string][]lineRow{}
	for _, l := range rc.s.lines {
		switch l.Kind {
		case "charge", "rounding":
		case "adjustment":
			linesOf[l.OriginEventID] = append(linesOf[l.OriginEventID], l)
		default:
			r.mismatch(l.InvoiceID, "invoice %s has a line of kind %q (origin %s)", l.InvoiceID, l.Kind, l.OriginEventID)
		}
	}
	for _, c := range rc.s.corrections {
		notesOf[c.OriginEventID] = append(notesOf[c.OriginEventID], c)
		rc.want("invoice", events.TypeInvoiceCorrectionIssued, c.EventID, "correction of "+c.OriginEventID)
	}
	for _, a := range rc.s.adjustments {
		want, other := linesOf[a.EventID], notesOf[a.EventID]
		wantKind, otherKind := "adjustment line", "correction note"
		if a.AfterClose {
			want, other = other, want
			wantKind, otherKind = otherKind, wantKind
		}
		switch len(want) {
		case 0:
			r.lost(a.EventID, "adjustment %s (after close: %v, %s %s %s) has no %s", a.AdjustmentID, a.AfterClose, a.Tenant, a.Period, a.Amount, wantKind)
		case 1:
		default:
			r.dup(a.EventID, "adjustment %s has %d %ss", a.AdjustmentID, len(want), wantKind)
		}
		if len(other) > 0 {
			r.dup(a.EventID, "adjustment %s (after close: %v) has a %s on invoice %s as well", a.AdjustmentID, a.AfterClose, otherKind, other[0].InvoiceID)
		}
		for _, l := range append(want, other...) {
			inv := rc.invoiceByID[l.InvoiceID]
			switch {
			case !l.Amount.Equal(a.Amount) && l.Kind == "adjustment":
				r.mismatch(a.EventID, "adjustment %s: line of %s, the adjustment is %s", a.AdjustmentID, l.Amount, a.Amount)
			case inv.Tenant != a.Tenant || inv.Period != a.Period || inv.Currency != a.Currency:
				r.mismatch(a.EventID, "adjustment %s (%s %s %s) is on invoice %s of %s %s %s", a.AdjustmentID, a.Tenant, a.Period, a.Currency,
					inv.InvoiceID, inv.Tenant, inv.Period, inv.Currency)
			}
		}
	}
	for _, group := range []map[string][]lineRow{linesOf, notesOf} {
		for origin, ls := range group {
			if _, ok := rc.adjByEvent[origin]; !ok {
				r.dup(origin, "invoice %s has a %s of %s for event %s, which is no adjustment", ls[0].InvoiceID, ls[0].Kind, ls[0].Amount, origin)
			}
		}
	}
}

// invoiceTotals: every (tenant, period, currency) with a charge or an
// adjustment has its period closed in billing, the close applied in
// invoice (counting what billing counted) and an issued invoice whose
// subtotal = its charge and adjustment lines = billing's charges and
// counted adjustments, total = subtotal rounded half-even, and rounding
// line = total - subtotal (none when it is zero).
func (rc *reconciler) invoiceTotals() error {
	billed, counted := rc.billed()
	return rc.invoiceTotalsOf(billed, counted)
}

// invoiceTotalsOf is invoiceTotals given billing's sums (billed) and
// counts (counted), as billed returns them.
func (rc *reconciler) invoiceTotalsOf(billed map[string]decimal.Decimal, counted map[string][2]int64) error {
	lines := rc.lineTotals()
	status := map[string]string{}
	for _, p := range rc.s.periods {
		status[p.Tenant+"/"+p.Period] = p.Status
	}
	closes := map[string]closeRow{}
	for _, c := range rc.s.closes {
		closes[c.Tenant+"/"+c.Period] = c
	}
	checkedPeriod := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(billed)) {
		tenant, rest, _ := strings.Cut(k, "/")
		period, currency, _ := strings.Cut(rest, "/")
		if tp := tenant + "/" + period; !checkedPeriod[tp] {
			checkedPeriod[tp] = true
			rc.periodClosed(tenant, period, status[tp], closes, counted[tp])
		}
		if err := rc.invoiceTotal(k, currency, billed[k], lines); err != nil {
			return err
		}
	}
	return nil
}

// billed returns billing's charges and counted adjustments by
// tenant/period/currency (zero for one with only adjustments after its
// close: its invoice must exist, issued), and their numbers by
// tenant/period.
func (rc *reconciler) billed() (billed map[string]decimal.Decimal, counted map[string][2]int64) {
	billed = map[string]decimal.Decimal{} // tenant/period/currency -> charges + counted adjustments
	counted = map[string][2]int64{}       // tenant/period -> charges, counted adjustments
	for _, c := range rc.s.charges {
		k := invoiceKey(c.Tenant, c.Period, c.Currency)
		billed[k] = billed[k].Add(c.Amount)
		n := counted[c.Tenant+"/"+c.Period]
		counted[c.Tenant+"/"+c.Period] = [2]int64{n[0] + 1, n[1]}
	}
	for _, a := range rc.s.adjustments {
		k := invoiceKey(a.Tenant, a.Period, a.Currency)
		if a.AfterClose {
			if _, ok := billed[k]; !ok {
				billed[k] = decimal.Zero
			}
			continue
		}
		billed[k] = billed[k].Add(a.Amount)
		n := counted[a.Tenant+"/"+a.Period]
		counted[a.Tenant+"/"+a.Period] = [2]int64{n[0], n[1] + 1}
	}
	return billed, counted
}

// invoiceLineTotals are the sums of each invoice's lines, by invoice id.
type invoiceLineTotals struct {
	sum       map[string]decimal.Decimal // charge and adjustment lines
	rounding  map[string]decimal.Decimal // rounding lines
	roundings map[string]int             // how many rounding lines
}

func (rc *reconciler) lineTotals() invoiceLineTotals {
	t := invoiceLineTotals{sum: map[string]decimal.Decimal{}, rounding: map[string]decimal.Decimal{}, roundings: map[string]int{}}
	for _, l := range rc.s.lines {
		if l.Kind == "rounding" {
			t.rounding[l.InvoiceID] = t.rounding[l.InvoiceID].Add(l.Amount)
			t.roundings[l.InvoiceID]++
			continue
		}
		t.sum[l.InvoiceID] = t.sum[l.InvoiceID].Add(l.Amount)
	}
	return t
}

// periodClosed: tenant's period is closed in billing (status), and invoice
// applied the close counting the charges and adjustments billing counted.
func (rc *reconciler) periodClosed(tenant, period, status string, closes map[string]closeRow, counted [2]int64) {
	r, tp := rc.r, tenant+"/"+period
	if status != "closed" {
		r.mismatch(tp, "billing period %s of %s is %q, want closed", period, tenant, status)
	}
	if c, ok := closes[tp]; !ok {
		r.lost(tp, "invoice never applied the close of %s %s", tenant, period)
	} else if c.Charges != counted[0] || c.Adjustments != counted[1] {
		r.mismatch(tp, "invoice applied the close of %s %s (%s) as %d charges and %d adjustments; billing holds %d and %d counted by the close",
			tenant, period, c.CloseEventID, c.Charges, c.Adjustments, counted[0], counted[1])
	}
}

// invoiceTotal: the invoice of k (tenant/period/currency) is issued, its
// charge and adjustment lines sum to billed, its subtotal to them, its total
// to the subtotal rounded, and its rounding line makes up the difference.
func (rc *reconciler) invoiceTotal(k, currency string, billed decimal.Decimal, lines invoiceLineTotals) error {
	r := rc.r
	inv, ok := rc.invoiceOf[k]
	if !ok {
		r.lost(k, "no invoice for %s", k)
		return nil
	}
	if inv.Status != "issued" || inv.Subtotal == nil || inv.Total == nil {
		r.mismatch(inv.InvoiceID, "invoice %s (%s) is %s, want issued", inv.InvoiceID, k, inv.Status)
		return nil
	}
	total, err := money.Round(*inv.Subtotal, currency)
	if err != nil {
		return err
	}
	id := inv.InvoiceID
	sum, rounding, roundings := lines.sum[id], lines.rounding[id], lines.roundings[id]
	switch {
	case !sum.Equal(billed):
		r.mismatch(id, "invoice %s (%s): its charge and adjustment lines sum to %s; billing's charges and counted adjustments to %s", id, k, sum, billed)
	case !inv.Subtotal.Equal(sum):
		r.mismatch(id, "invoice %s (%s): subtotal %s, its charge and adjustment lines sum to %s", id, k, inv.Subtotal, sum)
	case !inv.Total.Equal(total):
		r.mismatch(id, "invoice %s (%s): total %s, subtotal %s rounded half-even is %s", id, k, inv.Total, inv.Subtotal, total)
	case !inv.Total.Equal(sum.Add(rounding)) || roundings > 1 || (roundings == 1) == total.Equal(*inv.Subtotal):
		r.mismatch(id, "invoice %s (%s): total %s, its lines sum to %s with %d rounding lines of %s (rounding due: %s)", id, k,
			inv.Total, sum.Add(rounding), roundings, rounding, total.Sub(*inv.Subtotal))
	}
	return nil
}

// invoiceNumbers: each tenant's issued invoices are numbered 1..n, no gap
// and no repeat; an open invoice has no number.
func (rc *reconciler) invoiceNumbers() {
	r := rc.r
	numbers := map[string]map[int64][]string{} // tenant -> number -> invoices
	issued := map[string]int{}
	for _, inv := range rc.s.invoices {
		switch {
		case inv.Status == "issued" && inv.Number == nil:
			r.mismatch(inv.InvoiceID, "issued invoice %s of %s has no number", inv.InvoiceID, inv.Tenant)
		case inv.Status != "issued" && inv.Number != nil:
			r.mismatch(inv.InvoiceID, "%s invoice %s of %s has number %d", inv.Status, inv.InvoiceID, inv.Tenant, *inv.Number)
		}
		if inv.Status != "issued" || inv.Number == nil {
			continue
		}
		issued[inv.Tenant]++
		if numbers[inv.Tenant] == nil {
			numbers[inv.Tenant] = map[int64][]string{}
		}
		numbers[inv.Tenant][*inv.Number] = append(numbers[inv.Tenant][*inv.Number], inv.InvoiceID)
	}
	for _, tenant := range slices.Sorted(maps.Keys(numbers)) {
		byNumber := numbers[tenant]
		for _, n := range slices.Sorted(maps.Keys(byNumber)) {
			ids := byNumber[n]
			switch {
			case len(ids) > 1:
				r.dup(tenant, "invoice number %d of %s is on %d invoices: %s", n, tenant, len(ids), strings.Join(ids, ", "))
			case n < 1 || n > int64(issued[tenant]):
				r.mismatch(ids[0], "invoice %s of %s is number %d; %s has %d issued invoices, numbered 1..%d", ids[0], tenant, n, tenant,
					issued[tenant], issued[tenant])
			}
		}
		for n := int64(1); n <= int64(issued[tenant]); n++ {
			if _, ok := byNumber[n]; !ok {
				r.lost(tenant, "invoice number %d of %s is missing: %d invoices issued, numbers %v", n, tenant, issued[tenant],
					slices.Sorted(maps.Keys(byNumber)))
			}
		}
	}
}

// queryProjection: query projects every event once, as what it is (an
// issued invoice as its InvoiceIssued with the invoice's total), and no
// event no service holds.
func (rc *reconciler) queryProjection() {
	r := rc.r
	proj := map[string]projectedRow{}
	issuedOf := map[string]int{} // invoice id -> projected InvoiceIssued
	for _, p := range rc.s.projected {
		proj[p.EventID] = p
		if p.EventType == events.TypeInvoiceIssued {
			issuedOf[p.SubjectID]++
		}
	}
	known := map[string]bool{}
	expect := func(id, eventType, what string, check func(p projectedRow) string) {
		known[id] = true
		p, ok := proj[id]
		if !ok {
			r.lost(id, "%s (%s %s) is not in query's projection", what, eventType, id)
			return
		}
		if p.EventType != eventType {
			r.mismatch(id, "query projected %s as %s, want %s", id, p.EventType, eventType)
			return
		}
		if check != nil {
			if msg := check(p); msg != "" {
				r.mismatch(id, "query's projection of %s %s: %s", eventType, id, msg)
			}
		}
	}
	for _, p := range rc.s.prices {
		expect(p.EventID, events.TypePriceActivated, "price "+p.Meter, nil)
	}
	for _, f := range rc.s.facts {
		expect(f.EventID, events.TypeUsageAccepted, "usage fact "+f.UsageID, func(p projectedRow) string {
			if p.Quantity == nil || !p.Quantity.Equal(f.Quantity) || p.Meter != f.Meter {
				return fmt.Sprintf("%s %v, the fact is %s %s", p.Meter, p.Quantity, f.Meter, f.Quantity)
			}
			return ""
		})
	}
	for _, c := range rc.s.charges {
		expect(c.EventID, events.TypeChargeRated, "charge "+c.ChargeID, func(p projectedRow) string {
			if p.Amount == nil || !p.Amount.Equal(c.Amount) || p.OriginEventID != c.UsageEventID || p.Currency != c.Currency {
				return fmt.Sprintf("%v %s from %s, the charge is %s %s from %s", p.Amount, p.Currency, p.OriginEventID, c.Amount, c.Currency, c.UsageEventID)
			}
			return ""
		})
	}
	for _, a := range rc.s.adjustments {
		expect(a.EventID, events.TypeAdjustmentPosted, "adjustment "+a.AdjustmentID, func(p projectedRow) string {
			if p.Amount == nil || !p.Amount.Equal(a.Amount) {
				return fmt.Sprintf("%v, the adjustment is %s", p.Amount, a.Amount)
			}
			return ""
		})
	}
	for _, inv := range rc.s.invoices {
		if inv.Status != "issued" {
			continue
		}
		rc.want("invoice", events.TypeInvoiceIssued, inv.IssuedEventID, "invoice "+inv.InvoiceID)
		expect(inv.IssuedEventID, events.TypeInvoiceIssued, "invoice "+inv.InvoiceID, func(p projectedRow) string {
			if p.SubjectID != inv.InvoiceID || p.Amount == nil || inv.Total == nil || !p.Amount.Equal(*inv.Total) {
				return fmt.Sprintf("invoice %s total %v, the invoice is %s total %v", p.SubjectID, p.Amount, inv.InvoiceID, inv.Total)
			}
			return rc.issuedFigures(inv, p.Issued)
		})
		if n := issuedOf[inv.InvoiceID]; n > 1 {
			r.dup(inv.InvoiceID, "query projected invoice %s as issued %d times", inv.InvoiceID, n)
		}
	}
	for _, p := range rc.s.projected {
		switch p.EventType {
		case events.TypePriceActivated, events.TypeUsageAccepted, events.TypeChargeRated, events.TypeAdjustmentPosted, events.TypeInvoiceIssued:
			if !known[p.EventID] {
				r.dup(p.EventID, "query projected %s %s (origin %s, subject %s), which no service holds", p.EventType, p.EventID, p.OriginEventID, p.SubjectID)
			}
		}
	}
}

// issuedFigures compares what an InvoiceIssued says of its invoice (number,
// charge lines, charges, adjustments, subtotal, rounding) with the invoice.
func (rc *reconciler) issuedFigures(inv invoiceRow, got *issuedFigures) string {
	if got == nil {
		return "no figures in the event"
	}
	var want issuedFigures
	if inv.Number != nil {
		want.Number = *inv.Number
	}
	if inv.Subtotal != nil {
		want.Subtotal = *inv.Subtotal
	}
	for _, l := range rc.s.lines {
		if l.InvoiceID != inv.InvoiceID {
			continue
		}
		switch l.Kind {
		case "charge", "unpriced":
			want.ChargeLines++
			want.Charges += l.ChargeCount
		case "adjustment":
			want.Adjustments++
		case "rounding":
			want.Rounding = want.Rounding.Add(l.Amount)
		}
	}
	if got.Number != want.Number || got.ChargeLines != want.ChargeLines || got.Charges != want.Charges ||
		got.Adjustments != want.Adjustments || !got.Subtotal.Equal(want.Subtotal) || !got.Rounding.Equal(want.Rounding) {
		return fmt.Sprintf("the event says %+v, the invoice holds %+v", *got, want)
	}
	return ""
}

// queryTotals: query's totals (folded plus unfolded deltas) equal the
// services' sums: usage by meter, charged, adjusted and invoiced (issued
// totals plus correction notes) by currency, and the number of facts.
func (rc *reconciler) queryTotals() {
	r := rc.r
	want := map[sumKey]decimal.Decimal{}
	add := func(k sumKey, d decimal.Decimal) { want[k] = want[k].Add(d) }
	wantUsageCount := map[string]int64{}
	for _, f := range rc.s.facts {
		add(sumKey{f.Tenant, "usage", f.Meter}, f.Quantity)
		wantUsageCount[f.Tenant]++
	}
	for _, c := range rc.s.charges {
		add(sumKey{c.Tenant, "charged", c.Currency}, c.Amount)
	}
	for _, a := range rc.s.adjustments {
		add(sumKey{a.Tenant, "adjusted", a.Currency}, a.Amount)
	}
	for _, inv := range rc.s.invoices {
		if inv.Total != nil {
			add(sumKey{inv.Tenant, "invoiced", inv.Currency}, *inv.Total)
		}
	}
	for _, c := range rc.s.corrections {
		inv := rc.invoiceByID[c.InvoiceID]
		add(sumKey{inv.Tenant, "invoiced", inv.Currency}, c.Amount)
	}
	for _, tenant := range rc.tenants {
		if got := rc.s.usageCounts[tenant]; got != wantUsageCount[tenant] {
			r.mismatch(tenant, "query counts %d usage facts for %s, usage holds %d", got, tenant, wantUsageCount[tenant])
		}
		for _, kind := range []string{"usage", "charged", "adjusted", "invoiced"} {
			keys := map[string]bool{}
			for _, m := range []map[sumKey]decimal.Decimal{rc.s.totals, want} {
				for k := range m {
					if k.tenant == tenant && k.kind == kind {
						keys[k.key] = true
					}
				}
			}
			for _, key := range slices.Sorted(maps.Keys(keys)) {
				k := sumKey{tenant, kind, key}
				if got := rc.s.totals[k]; !got.Equal(want[k]) {
					r.mismatch(tenant, "query's %s total of %s for %s is %s; the services hold %s", kind, key, tenant, got, want[k])
				}
			}
		}
	}
}

// outbox: each effect's event written with it, once; no event of these
// types without its effect (nothing half-written).
func (rc *reconciler) outbox() {
	r := rc.r
	for service, wanted := range rc.outboxWant {
		for k, what := range wanted {
			eventType, id, _ := strings.Cut(k, "/")
			switch n := rc.s.outboxes[service][k]; {
			case n == 0:
				r.lost(id, "%s's %s has no %s in %s's outbox", service, what, eventType, service)
			case n > 1:
				r.dup(id, "%s's outbox holds %s %d times", service, k, n)
			}
		}
	}
	checked := map[string][]string{
		"meter": {events.TypePriceActivated}, "usage": {events.TypeUsageAccepted},
		"billing": {events.TypeChargeRated, events.TypeAdjustmentPosted, events.TypeBillingPeriodClosed},
		"invoice": {events.TypeInvoiceIssued, events.TypeInvoiceCorrectionIssued},
	}
	for service, rows := range rc.s.outboxes {
		for k := range rows {
			t, id, _ := strings.Cut(k, "/")
			if slices.Contains(checked[service], t) && rc.outboxWant[service][k] == "" {
				r.dup(id, "%s's outbox holds %s %s with no effect behind it (half-written)", service, t, id)
			}
		}
	}
}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Detail < fs[j].Detail })
}
