package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	// fact without its charge, a charge without its invoice line, an event
	// missing from query's projection, ...).
	Lost []Finding
	// Duplicated: an origin with more than one effect, or an effect with
	// no origin (a second charge for one usage fact, a line whose charge
	// does not exist, ...).
	Duplicated []Finding
	// Mismatch: an effect that exists once but says something else than
	// its origin (amount, price version, totals), or a broken invariant
	// that is neither a loss nor a duplicate.
	Mismatch []Finding
	// Counts of what was compared.
	Facts, Charges, Adjustments, InvoiceLines, Invoices, Projected, Prices int
	// ByVersion counts the usage facts by the price version that priced
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

// Rows read from the databases.
type (
	priceRow struct {
		Tenant, Meter, Currency string
		Version                 int64
		UnitPrice               decimal.Decimal
		EffectiveAt             time.Time
		EventID                 string
	}
	factRow struct {
		Tenant, SourceSystem, SourceEventID, UsageID, EventID, Meter, Currency string
		Quantity                                                               decimal.Decimal
		OccurredAt                                                             time.Time
		PriceVersion                                                           int64
	}
	chargeRow struct {
		ChargeID, EventID, UsageEventID, UsageID, Tenant, Meter, Currency, Period string
		Quantity, UnitPrice, Amount                                               decimal.Decimal
		PriceVersion                                                              int64
		Late                                                                      bool
		OccurredAt                                                                time.Time
	}
	adjustmentRow struct {
		AdjustmentID, EventID, Tenant, CorrectionOf, Currency, Period string
		Amount                                                        decimal.Decimal
	}
	invoiceRow struct {
		InvoiceID, Tenant, Period, Currency, Status, IssuedEventID string
		Subtotal, Total                                            *decimal.Decimal
	}
	lineRow struct {
		InvoiceID, OriginEventID, Kind string
		Amount                         decimal.Decimal
	}
	projectedRow struct {
		EventID, EventType, Tenant, OriginEventID, SubjectID, Currency, Meter string
		Quantity, Amount                                                      *decimal.Decimal
	}
)

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
//   - invoice lines = charges + adjustments: one line per origin event,
//     same amount, on the issued invoice of its tenant, period and
//     currency, whose subtotal, half-even rounded total and rounding line
//     agree;
//   - query projects every one of those events once, and its totals (the
//     folded totals plus the deltas not yet folded, as a summary read
//     folds them) equal the same sums;
//   - each service wrote every event of an effect into its outbox with
//     the effect, and none without (nothing half-written).
func Reconcile(ctx context.Context, db map[string]*pgxpool.Pool, tenants []string, ledger *Ledger) (*Reconciliation, error) {
	r := &Reconciliation{Tenants: tenants}
	// Read every database first.
	prices, err := collect(ctx, db["meter"], `
		SELECT tenant_id, meter_code, currency, version, unit_price::text, effective_at, event_id::text
		FROM price WHERE tenant_id = ANY($1) ORDER BY tenant_id, meter_code, currency, version`, tenants,
		func(row pgx.CollectableRow) (p priceRow, err error) {
			var up string
			err = row.Scan(&p.Tenant, &p.Meter, &p.Currency, &p.Version, &up, &p.EffectiveAt, &p.EventID)
			p.UnitPrice = decimal.RequireFromString(up)
			return
		})
	if err != nil {
		return nil, fmt.Errorf("meter prices: %w", err)
	}
	evidence := func(service string) (map[string]priceRow, error) {
		rows, err := collect(ctx, db[service], `
			SELECT tenant_id, meter_code, currency, version, unit_price::text, effective_at, event_id::text
			FROM price_evidence WHERE tenant_id = ANY($1)`, tenants,
			func(row pgx.CollectableRow) (p priceRow, err error) {
				var up string
				err = row.Scan(&p.Tenant, &p.Meter, &p.Currency, &p.Version, &up, &p.EffectiveAt, &p.EventID)
				p.UnitPrice = decimal.RequireFromString(up)
				return
			})
		if err != nil {
			return nil, fmt.Errorf("%s price evidence: %w", service, err)
		}
		out := map[string]priceRow{}
		for _, p := range rows {
			out[p.EventID] = p
		}
		return out, nil
	}
	usageEvidence, err := evidence("usage")
	if err != nil {
		return nil, err
	}
	billingEvidence, err := evidence("billing")
	if err != nil {
		return nil, err
	}
	facts, err := collect(ctx, db["usage"], `
		SELECT tenant_id, source_system, source_event_id, usage_id::text, event_id::text, meter_code, currency,
		       quantity::text, occurred_at, price_version
		FROM usage_fact WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (f factRow, err error) {
			var q string
			err = row.Scan(&f.Tenant, &f.SourceSystem, &f.SourceEventID, &f.UsageID, &f.EventID, &f.Meter, &f.Currency,
				&q, &f.OccurredAt, &f.PriceVersion)
			f.Quantity = decimal.RequireFromString(q)
			return
		})
	if err != nil {
		return nil, fmt.Errorf("usage facts: %w", err)
	}
	charges, err := collect(ctx, db["billing"], `
		SELECT charge_id::text, event_id::text, usage_event_id::text, usage_id::text, tenant_id, meter_code, currency,
		       period, quantity::text, unit_price::text, amount::text, price_version, late, occurred_at
		FROM charge WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (c chargeRow, err error) {
			var q, up, a string
			err = row.Scan(&c.ChargeID, &c.EventID, &c.UsageEventID, &c.UsageID, &c.Tenant, &c.Meter, &c.Currency,
				&c.Period, &q, &up, &a, &c.PriceVersion, &c.Late, &c.OccurredAt)
			c.Quantity, c.UnitPrice, c.Amount = decimal.RequireFromString(q), decimal.RequireFromString(up), decimal.RequireFromString(a)
			return
		})
	if err != nil {
		return nil, fmt.Errorf("charges: %w", err)
	}
	adjustments, err := collect(ctx, db["billing"], `
		SELECT adjustment_id::text, event_id::text, tenant_id, correction_of::text, currency, period, amount::text
		FROM adjustment WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (a adjustmentRow, err error) {
			var amt string
			err = row.Scan(&a.AdjustmentID, &a.EventID, &a.Tenant, &a.CorrectionOf, &a.Currency, &a.Period, &amt)
			a.Amount = decimal.RequireFromString(amt)
			return
		})
	if err != nil {
		return nil, fmt.Errorf("adjustments: %w", err)
	}
	periodStatus := map[string]string{}
	if err := scanEach(ctx, db["billing"], `SELECT tenant_id, period, status FROM billing_period WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.Rows) error {
			var t, p, s string
			if err := row.Scan(&t, &p, &s); err != nil {
				return err
			}
			periodStatus[t+"/"+p] = s
			return nil
		}); err != nil {
		return nil, fmt.Errorf("billing periods: %w", err)
	}
	invoices, err := collect(ctx, db["invoice"], `
		SELECT invoice_id::text, tenant_id, period, currency, status, coalesce(issued_event_id::text, ''),
		       subtotal::text, total::text
		FROM invoice WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (i invoiceRow, err error) {
			var sub, tot *string
			err = row.Scan(&i.InvoiceID, &i.Tenant, &i.Period, &i.Currency, &i.Status, &i.IssuedEventID, &sub, &tot)
			if sub != nil {
				d := decimal.RequireFromString(*sub)
				i.Subtotal = &d
			}
			if tot != nil {
				d := decimal.RequireFromString(*tot)
				i.Total = &d
			}
			return
		})
	if err != nil {
		return nil, fmt.Errorf("invoices: %w", err)
	}
	lines, err := collect(ctx, db["invoice"], `
		SELECT l.invoice_id::text, l.origin_event_id::text, l.kind, l.amount::text
		FROM invoice_line l JOIN invoice i USING (invoice_id) WHERE i.tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (l lineRow, err error) {
			var a string
			err = row.Scan(&l.InvoiceID, &l.OriginEventID, &l.Kind, &a)
			l.Amount = decimal.RequireFromString(a)
			return
		})
	if err != nil {
		return nil, fmt.Errorf("invoice lines: %w", err)
	}
	corrections := map[string][]lineRow{}
	if err := scanEach(ctx, db["invoice"], `
		SELECT c.invoice_id::text, c.origin_event_id::text, c.amount::text
		FROM invoice_correction c JOIN invoice i USING (invoice_id) WHERE i.tenant_id = ANY($1)`, tenants,
		func(row pgx.Rows) error {
			var l lineRow
			var a string
			if err := row.Scan(&l.InvoiceID, &l.OriginEventID, &a); err != nil {
				return err
			}
			l.Kind, l.Amount = "correction", decimal.RequireFromString(a)
			corrections[l.OriginEventID] = append(corrections[l.OriginEventID], l)
			return nil
		}); err != nil {
		return nil, fmt.Errorf("invoice corrections: %w", err)
	}
	closes := map[string]bool{}
	if err := scanEach(ctx, db["invoice"], `SELECT tenant_id, period FROM period_close WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.Rows) error {
			var t, p string
			if err := row.Scan(&t, &p); err != nil {
				return err
			}
			closes[t+"/"+p] = true
			return nil
		}); err != nil {
		return nil, fmt.Errorf("period closes: %w", err)
	}
	projected, err := collect(ctx, db["query"], `
		SELECT event_id::text, event_type, tenant_id, coalesce(origin_event_id::text, ''), coalesce(subject_id::text, ''),
		       coalesce(currency, ''), coalesce(meter_code, ''), quantity::text, amount::text
		FROM projected_event WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (p projectedRow, err error) {
			var q, a *string
			err = row.Scan(&p.EventID, &p.EventType, &p.Tenant, &p.OriginEventID, &p.SubjectID, &p.Currency, &p.Meter, &q, &a)
			if q != nil {
				d := decimal.RequireFromString(*q)
				p.Quantity = &d
			}
			if a != nil {
				d := decimal.RequireFromString(*a)
				p.Amount = &d
			}
			return
		})
	if err != nil {
		return nil, fmt.Errorf("query projection: %w", err)
	}
	projectedLines := map[string]int{}
	if err := scanEach(ctx, db["query"], `
		SELECT origin_event_id::text, kind FROM projected_invoice_line WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.Rows) error {
			var o, k string
			if err := row.Scan(&o, &k); err != nil {
				return err
			}
			projectedLines[o+"/"+k]++
			return nil
		}); err != nil {
		return nil, fmt.Errorf("query invoice lines: %w", err)
	}
	totals := map[string]map[string]map[string]decimal.Decimal{} // tenant -> kind -> key -> amount
	counts := map[string]map[string]int64{}                      // tenant -> kind -> events
	addTotal := func(t, kind, key string, amount decimal.Decimal, n int64) {
		if totals[t] == nil {
			totals[t], counts[t] = map[string]map[string]decimal.Decimal{}, map[string]int64{}
		}
		if totals[t][kind] == nil {
			totals[t][kind] = map[string]decimal.Decimal{}
		}
		totals[t][kind][key] = totals[t][kind][key].Add(amount)
		counts[t][kind] += n
	}
	if err := scanEach(ctx, db["query"], `
		SELECT tenant_id, kind, key, amount::text, events FROM tenant_total WHERE tenant_id = ANY($1)
		UNION ALL
		SELECT tenant_id, kind, key, sum(amount)::text, count(*) FROM summary_delta WHERE tenant_id = ANY($1)
		GROUP BY tenant_id, kind, key`, tenants,
		func(row pgx.Rows) error {
			var t, kind, key, a string
			var n int64
			if err := row.Scan(&t, &kind, &key, &a, &n); err != nil {
				return err
			}
			addTotal(t, kind, key, decimal.RequireFromString(a), n)
			return nil
		}); err != nil {
		return nil, fmt.Errorf("query totals: %w", err)
	}
	outboxes := map[string]map[string]int{} // service -> "type/event id" -> rows
	for _, service := range []string{"meter", "usage", "billing", "invoice"} {
		outboxes[service] = map[string]int{}
		if err := scanEach(ctx, db[service], `
			SELECT event_type, event_id::text FROM outbox_event WHERE split_part(partition_key, '|', 1) = ANY($1)`, tenants,
			func(row pgx.Rows) error {
				var t, id string
				if err := row.Scan(&t, &id); err != nil {
					return err
				}
				outboxes[service][t+"/"+id]++
				return nil
			}); err != nil {
			return nil, fmt.Errorf("%s outbox: %w", service, err)
		}
	}

	r.Facts, r.Charges, r.Adjustments, r.InvoiceLines, r.Invoices, r.Projected, r.Prices =
		len(facts), len(charges), len(adjustments), len(lines), len(invoices), len(projected), len(prices)

	// Outbox: each effect's event written with it, once; no event of
	// these types without its effect.
	outboxWant := map[string]map[string]string{} // service -> type/id -> what
	want := func(service, eventType, id, what string) {
		if outboxWant[service] == nil {
			outboxWant[service] = map[string]string{}
		}
		outboxWant[service][eventType+"/"+id] = what
	}

	// Prices.
	byID := map[string]priceRow{}
	schedule := map[string][]priceRow{} // tenant/meter/currency -> versions ascending
	for _, p := range prices {
		byID[p.EventID] = p
		k := p.Tenant + "/" + p.Meter + "/" + p.Currency
		schedule[k] = append(schedule[k], p)
		want("meter", events.TypePriceActivated, p.EventID, "price "+k)
	}
	ledger.mu.Lock()
	ledgerPrices := slices.Clone(ledger.Prices)
	ledgerAdjustments := slices.Clone(ledger.Adjustments)
	ledger.mu.Unlock()
	for _, lp := range ledgerPrices {
		if !slices.Contains(tenants, lp.Tenant) {
			continue
		}
		p, ok := byID[lp.EventID]
		switch {
		case !ok:
			r.lost(lp.EventID, "price %s %s v%d of %s was activated (201) but is not in meter's price table", lp.Meter, lp.Currency, lp.Version, lp.Tenant)
		case p.Version != lp.Version || !p.UnitPrice.Equal(lp.UnitPrice) || !p.EffectiveAt.Equal(lp.EffectiveAt):
			r.mismatch(lp.EventID, "price %s v%d of %s: meter holds v%d %s from %s, the client was answered v%d %s from %s",
				lp.Meter, lp.Version, lp.Tenant, p.Version, p.UnitPrice, p.EffectiveAt, lp.Version, lp.UnitPrice, lp.EffectiveAt)
		}
	}
	for service, ev := range map[string]map[string]priceRow{"usage": usageEvidence, "billing": billingEvidence} {
		for _, p := range prices {
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
			if _, ok := byID[id]; !ok {
				r.dup(id, "%s holds price evidence %s v%d of %s from event %s, which meter never activated", service, e.Meter, e.Version, e.Tenant, id)
			}
		}
	}
	for _, ss := range schedule {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Version < ss[j].Version })
	}
	priceAt := func(tenant, meter, currency string, at time.Time) (priceRow, bool) {
		ss := schedule[tenant+"/"+meter+"/"+currency]
		for i := len(ss) - 1; i >= 0; i-- {
			if !ss[i].EffectiveAt.After(at) {
				return ss[i], true
			}
		}
		return priceRow{}, false
	}
	version := func(tenant, meter, currency string, v int64) (priceRow, bool) {
		for _, p := range schedule[tenant+"/"+meter+"/"+currency] {
			if p.Version == v {
				return p, true
			}
		}
		return priceRow{}, false
	}

	// Usage facts against what the client was answered.
	factByIdentity := map[string]factRow{}
	factByEvent := map[string]factRow{}
	for _, f := range facts {
		factByIdentity[f.Tenant+"|"+f.SourceEventID] = f
		factByEvent[f.EventID] = f
		want("usage", events.TypeUsageAccepted, f.EventID, "usage fact "+f.UsageID)
	}
	sent := map[string]*Fact{}
	for _, lf := range ledger.Facts(tenants...) {
		sent[lf.Tenant+"|"+lf.SourceEventID] = lf
		f, ok := factByIdentity[lf.Tenant+"|"+lf.SourceEventID]
		switch {
		case lf.Accepted && !ok:
			r.lost(lf.EventID, "usage fact %s/%s was accepted (usage %s) but is not in usage's database", lf.Tenant, lf.SourceEventID, lf.UsageID)
		case lf.Accepted && (f.UsageID != lf.UsageID || f.EventID != lf.EventID || f.PriceVersion != lf.PriceVersion):
			r.mismatch(f.EventID, "usage fact %s/%s: database has usage %s event %s v%d, the client was answered usage %s event %s v%d",
				lf.Tenant, lf.SourceEventID, f.UsageID, f.EventID, f.PriceVersion, lf.UsageID, lf.EventID, lf.PriceVersion)
		}
		if ok && (f.Meter != lf.Meter || !f.Quantity.Equal(lf.Quantity) || !f.OccurredAt.Equal(lf.OccurredAt) || f.SourceSystem != SourceSystem) {
			r.mismatch(f.EventID, "usage fact %s/%s holds %s %s at %s, sent %s %s at %s", lf.Tenant, lf.SourceEventID,
				f.Meter, f.Quantity, f.OccurredAt, lf.Meter, lf.Quantity, lf.OccurredAt)
		}
	}
	r.ByVersion = map[int64]int{}
	for _, f := range facts {
		r.ByVersion[f.PriceVersion]++
		lf, ok := sent[f.Tenant+"|"+f.SourceEventID]
		switch {
		case !ok:
			r.dup(f.EventID, "usage fact %s (%s/%s/%s) was never sent", f.UsageID, f.Tenant, f.SourceSystem, f.SourceEventID)
		case !lf.Accepted && !lf.Unresolved:
			r.mismatch(f.EventID, "usage fact %s/%s is in usage's database, but its request was never answered as accepted", f.Tenant, f.SourceEventID)
		}
		p, ok := priceAt(f.Tenant, f.Meter, f.Currency, f.OccurredAt)
		if !ok {
			r.mismatch(f.EventID, "usage fact %s (%s at %s) has no %s price in effect in meter's table", f.UsageID, f.Meter, f.OccurredAt, f.Currency)
		} else if p.Version != f.PriceVersion {
			r.mismatch(f.EventID, "usage fact %s (%s at %s) priced by version %d; the version in effect then is %d (from %s)",
				f.UsageID, f.Meter, f.OccurredAt.Format(time.RFC3339Nano), f.PriceVersion, p.Version, p.EffectiveAt.Format(time.RFC3339Nano))
		}
	}

	// Charges: exactly one per usage fact.
	chargesOf := map[string][]chargeRow{}
	chargeByEvent := map[string]chargeRow{}
	for _, c := range charges {
		chargesOf[c.UsageEventID] = append(chargesOf[c.UsageEventID], c)
		chargeByEvent[c.EventID] = c
		want("billing", events.TypeChargeRated, c.EventID, "charge "+c.ChargeID)
	}
	for _, f := range facts {
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
			p, ok := version(c.Tenant, c.Meter, c.Currency, c.PriceVersion)
			switch {
			case c.Tenant != f.Tenant || c.UsageID != f.UsageID || c.Meter != f.Meter || c.Currency != f.Currency ||
				!c.Quantity.Equal(f.Quantity) || c.PriceVersion != f.PriceVersion:
				r.mismatch(c.ChargeID, "charge %s of usage event %s: %s %s %s v%d, the fact: %s %s %s v%d", c.ChargeID, f.EventID,
					c.Meter, c.Quantity, c.Currency, c.PriceVersion, f.Meter, f.Quantity, f.Currency, f.PriceVersion)
			case !ok || !c.UnitPrice.Equal(p.UnitPrice):
				r.mismatch(c.ChargeID, "charge %s at unit price %s, meter's %s v%d is %s", c.ChargeID, c.UnitPrice, c.Meter, c.PriceVersion, p.UnitPrice)
			case !c.Amount.Equal(c.Quantity.Mul(c.UnitPrice)):
				r.mismatch(c.ChargeID, "charge %s: amount %s, quantity %s x unit price %s = %s", c.ChargeID, c.Amount, c.Quantity, c.UnitPrice, c.Quantity.Mul(c.UnitPrice))
			case c.Late || c.Period != events.Period(f.OccurredAt):
				r.mismatch(c.ChargeID, "charge %s rated into %s (late %v); the usage occurred in %s, before its period closed",
					c.ChargeID, c.Period, c.Late, events.Period(f.OccurredAt))
			}
		}
	}
	for _, c := range charges {
		if _, ok := factByEvent[c.UsageEventID]; !ok {
			r.dup(c.UsageEventID, "charge %s (event %s) rates usage event %s, which is no usage fact", c.ChargeID, c.EventID, c.UsageEventID)
		}
	}

	// Adjustments.
	adjByEvent := map[string]adjustmentRow{}
	for _, a := range adjustments {
		adjByEvent[a.EventID] = a
		want("billing", events.TypeAdjustmentPosted, a.EventID, "adjustment "+a.AdjustmentID)
	}
	posted := map[string]bool{}
	for _, la := range ledgerAdjustments {
		if !slices.Contains(tenants, la.Tenant) {
			continue
		}
		posted[la.EventID] = true
		a, ok := adjByEvent[la.EventID]
		switch {
		case !ok:
			r.lost(la.EventID, "adjustment %s of %s was posted (201) but is not in billing's database", la.AdjustmentID, la.Tenant)
		case !a.Amount.Equal(la.Amount) || a.Currency != la.Currency || a.CorrectionOf != la.CorrectionOf:
			r.mismatch(la.EventID, "adjustment %s: %s %s on %s, posted %s %s on %s", a.AdjustmentID, a.Amount, a.Currency, a.CorrectionOf,
				la.Amount, la.Currency, la.CorrectionOf)
		}
	}
	for _, a := range adjustments {
		if !posted[a.EventID] {
			r.dup(a.EventID, "adjustment %s of %s was never posted by the client", a.AdjustmentID, a.Tenant)
		}
	}

	// Invoice lines = charges + adjustments.
	invoiceByID := map[string]invoiceRow{}
	invoiceOf := map[string]invoiceRow{} // tenant/period/currency
	for _, inv := range invoices {
		invoiceByID[inv.InvoiceID] = inv
		invoiceOf[inv.Tenant+"/"+inv.Period+"/"+inv.Currency] = inv
		if inv.IssuedEventID != "" {
			want("invoice", events.TypeInvoiceIssued, inv.IssuedEventID, "invoice "+inv.InvoiceID)
		}
	}
	linesOf := map[string][]lineRow{}
	var roundingLines []lineRow
	for _, l := range lines {
		if l.Kind == "rounding" {
			roundingLines = append(roundingLines, l)
			continue
		}
		linesOf[l.OriginEventID] = append(linesOf[l.OriginEventID], l)
	}
	type origin struct {
		id, kind, tenant, period, currency string
		amount                             decimal.Decimal
	}
	var origins []origin
	for _, c := range charges {
		origins = append(origins, origin{c.EventID, "charge", c.Tenant, c.Period, c.Currency, c.Amount})
	}
	for _, a := range adjustments {
		origins = append(origins, origin{a.EventID, "adjustment", a.Tenant, a.Period, a.Currency, a.Amount})
	}
	isOrigin := map[string]bool{}
	sums := map[string]decimal.Decimal{} // tenant/period/currency -> charges + adjustments on the invoice
	for _, o := range origins {
		isOrigin[o.id] = true
		ls := append(slices.Clone(linesOf[o.id]), corrections[o.id]...)
		switch len(ls) {
		case 0:
			r.lost(o.id, "%s event %s (%s %s %s) has no invoice line", o.kind, o.id, o.tenant, o.period, o.amount)
			continue
		case 1:
		default:
			r.dup(o.id, "%s event %s has %d invoice lines", o.kind, o.id, len(ls))
		}
		for _, l := range ls {
			inv := invoiceByID[l.InvoiceID]
			switch {
			case l.Kind != o.kind && !(o.kind == "adjustment" && l.Kind == "correction"):
				r.mismatch(o.id, "%s event %s has a %s line", o.kind, o.id, l.Kind)
			case !l.Amount.Equal(o.amount):
				r.mismatch(o.id, "%s event %s: line of %s, the %s is %s", o.kind, o.id, l.Amount, o.kind, o.amount)
			case inv.Tenant != o.tenant || inv.Period != o.period || inv.Currency != o.currency:
				r.mismatch(o.id, "%s event %s (%s %s %s) is on invoice %s of %s %s %s", o.kind, o.id, o.tenant, o.period, o.currency,
					inv.InvoiceID, inv.Tenant, inv.Period, inv.Currency)
			}
			if l.Kind != "correction" {
				k := inv.Tenant + "/" + inv.Period + "/" + inv.Currency
				sums[k] = sums[k].Add(l.Amount)
			}
		}
	}
	for origin, ls := range linesOf {
		if !isOrigin[origin] {
			r.dup(origin, "invoice %s has a %s line of %s for event %s, which is no charge or adjustment", ls[0].InvoiceID, ls[0].Kind, ls[0].Amount, origin)
		}
	}
	rounding := map[string]decimal.Decimal{}
	roundingCount := map[string]int{}
	for _, l := range roundingLines {
		rounding[l.InvoiceID] = rounding[l.InvoiceID].Add(l.Amount)
		roundingCount[l.InvoiceID]++
	}
	wantInvoices := map[string]bool{}
	for _, o := range origins {
		wantInvoices[o.tenant+"/"+o.period+"/"+o.currency] = true
	}
	for _, k := range slices.Sorted(maps.Keys(wantInvoices)) {
		tenant, period, _ := strings.Cut(k, "/")
		period, currency, _ := strings.Cut(period, "/")
		if periodStatus[tenant+"/"+period] != "closed" {
			r.mismatch(tenant+"/"+period, "billing period %s of %s is %q, want closed", period, tenant, periodStatus[tenant+"/"+period])
		}
		if !closes[tenant+"/"+period] {
			r.lost(tenant+"/"+period, "invoice never applied the close of %s %s", tenant, period)
		}
		inv, ok := invoiceOf[k]
		if !ok {
			r.lost(k, "no invoice for %s", k)
			continue
		}
		if inv.Status != "issued" || inv.Subtotal == nil || inv.Total == nil {
			r.mismatch(inv.InvoiceID, "invoice %s (%s) is %s, want issued", inv.InvoiceID, k, inv.Status)
			continue
		}
		total, err := money.Round(*inv.Subtotal, currency)
		if err != nil {
			return nil, err
		}
		switch {
		case !inv.Subtotal.Equal(sums[k]):
			r.mismatch(inv.InvoiceID, "invoice %s (%s): subtotal %s, its charge and adjustment lines sum to %s", inv.InvoiceID, k, inv.Subtotal, sums[k])
		case !inv.Total.Equal(total):
			r.mismatch(inv.InvoiceID, "invoice %s (%s): total %s, subtotal %s rounded half-even is %s", inv.InvoiceID, k, inv.Total, inv.Subtotal, total)
		case !rounding[inv.InvoiceID].Equal(total.Sub(*inv.Subtotal)) || roundingCount[inv.InvoiceID] > 1 ||
			(roundingCount[inv.InvoiceID] == 1) != !total.Equal(*inv.Subtotal):
			r.mismatch(inv.InvoiceID, "invoice %s (%s): %d rounding lines of %s for a rounding of %s", inv.InvoiceID, k,
				roundingCount[inv.InvoiceID], rounding[inv.InvoiceID], total.Sub(*inv.Subtotal))
		}
	}

	// Query: every event projected once, totals equal the sums.
	proj := map[string]projectedRow{}
	for _, p := range projected {
		proj[p.EventID] = p
	}
	expectProjected := func(id, eventType, what string, check func(p projectedRow) string) {
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
	known := map[string]bool{}
	for _, p := range prices {
		known[p.EventID] = true
		expectProjected(p.EventID, events.TypePriceActivated, "price "+p.Meter, nil)
	}
	for _, f := range facts {
		known[f.EventID] = true
		expectProjected(f.EventID, events.TypeUsageAccepted, "usage fact "+f.UsageID, func(p projectedRow) string {
			if p.Quantity == nil || !p.Quantity.Equal(f.Quantity) || p.Meter != f.Meter {
				return fmt.Sprintf("%s %v, the fact is %s %s", p.Meter, p.Quantity, f.Meter, f.Quantity)
			}
			return ""
		})
	}
	for _, c := range charges {
		known[c.EventID] = true
		expectProjected(c.EventID, events.TypeChargeRated, "charge "+c.ChargeID, func(p projectedRow) string {
			if p.Amount == nil || !p.Amount.Equal(c.Amount) || p.OriginEventID != c.UsageEventID || p.Currency != c.Currency {
				return fmt.Sprintf("%v %s from %s, the charge is %s %s from %s", p.Amount, p.Currency, p.OriginEventID, c.Amount, c.Currency, c.UsageEventID)
			}
			return ""
		})
	}
	for _, a := range adjustments {
		known[a.EventID] = true
		expectProjected(a.EventID, events.TypeAdjustmentPosted, "adjustment "+a.AdjustmentID, func(p projectedRow) string {
			if p.Amount == nil || !p.Amount.Equal(a.Amount) {
				return fmt.Sprintf("%v, the adjustment is %s", p.Amount, a.Amount)
			}
			return ""
		})
	}
	for _, inv := range invoices {
		if inv.IssuedEventID == "" {
			continue
		}
		known[inv.IssuedEventID] = true
		expectProjected(inv.IssuedEventID, events.TypeInvoiceIssued, "invoice "+inv.InvoiceID, func(p projectedRow) string {
			if p.Amount == nil || inv.Total == nil || !p.Amount.Equal(*inv.Total) {
				return fmt.Sprintf("total %v, the invoice's is %v", p.Amount, inv.Total)
			}
			return ""
		})
	}
	for _, l := range lines {
		inv := invoiceByID[l.InvoiceID]
		if inv.Status == "issued" && projectedLines[l.OriginEventID+"/"+l.Kind] == 0 && l.Kind != "rounding" {
			r.lost(l.OriginEventID, "the %s line of %s on invoice %s is not in query's projection of the invoice", l.Kind, l.OriginEventID, l.InvoiceID)
		}
	}
	for _, p := range projected {
		switch p.EventType {
		case events.TypePriceActivated, events.TypeUsageAccepted, events.TypeChargeRated, events.TypeAdjustmentPosted, events.TypeInvoiceIssued:
			if !known[p.EventID] {
				r.dup(p.EventID, "query projected %s %s (origin %s), which no service holds", p.EventType, p.EventID, p.OriginEventID)
			}
		}
	}
	type sumKey struct{ tenant, kind, key string }
	wantTotals := map[sumKey]decimal.Decimal{}
	wantUsageCount := map[string]int64{}
	for _, f := range facts {
		wantTotals[sumKey{f.Tenant, "usage", f.Meter}] = wantTotals[sumKey{f.Tenant, "usage", f.Meter}].Add(f.Quantity)
		wantUsageCount[f.Tenant]++
	}
	for _, c := range charges {
		k := sumKey{c.Tenant, "charged", c.Currency}
		wantTotals[k] = wantTotals[k].Add(c.Amount)
	}
	for _, a := range adjustments {
		k := sumKey{a.Tenant, "adjusted", a.Currency}
		wantTotals[k] = wantTotals[k].Add(a.Amount)
	}
	for _, inv := range invoices {
		if inv.Total != nil {
			k := sumKey{inv.Tenant, "invoiced", inv.Currency}
			wantTotals[k] = wantTotals[k].Add(*inv.Total)
		}
	}
	for _, cs := range corrections {
		for _, c := range cs {
			inv := invoiceByID[c.InvoiceID]
			k := sumKey{inv.Tenant, "invoiced", inv.Currency}
			wantTotals[k] = wantTotals[k].Add(c.Amount)
		}
	}
	for _, tenant := range tenants {
		if counts[tenant]["usage"] != wantUsageCount[tenant] {
			r.mismatch(tenant, "query counts %d usage facts for %s, usage holds %d", counts[tenant]["usage"], tenant, wantUsageCount[tenant])
		}
		for _, kind := range []string{"usage", "charged", "adjusted", "invoiced"} {
			keys := map[string]bool{}
			for k := range totals[tenant][kind] {
				keys[k] = true
			}
			for k := range wantTotals {
				if k.tenant == tenant && k.kind == kind {
					keys[k.key] = true
				}
			}
			for _, key := range slices.Sorted(maps.Keys(keys)) {
				got, want := totals[tenant][kind][key], wantTotals[sumKey{tenant, kind, key}]
				if !got.Equal(want) {
					r.mismatch(tenant, "query's %s total of %s for %s is %s; the services hold %s", kind, key, tenant, got, want)
				}
			}
		}
	}

	// Nothing half-written: outbox rows and effects one to one.
	for service, wanted := range outboxWant {
		for k, what := range wanted {
			switch n := outboxes[service][k]; {
			case n == 0:
				r.lost(strings.SplitN(k, "/", 2)[1], "%s's %s has no %s in %s's outbox", service, what, strings.SplitN(k, "/", 2)[0], service)
			case n > 1:
				r.dup(strings.SplitN(k, "/", 2)[1], "%s's outbox holds %s %d times", service, k, n)
			}
		}
	}
	checked := map[string][]string{
		"meter": {events.TypePriceActivated}, "usage": {events.TypeUsageAccepted},
		"billing": {events.TypeChargeRated, events.TypeAdjustmentPosted}, "invoice": {events.TypeInvoiceIssued},
	}
	for service, rows := range outboxes {
		for k := range rows {
			t, id, _ := strings.Cut(k, "/")
			if slices.Contains(checked[service], t) && outboxWant[service][k] == "" {
				r.dup(id, "%s's outbox holds %s %s with no %s behind it (half-written)", service, t, id, strings.ToLower(t))
			}
		}
	}
	sortFindings(r.Lost)
	sortFindings(r.Duplicated)
	sortFindings(r.Mismatch)
	return r, nil
}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Detail < fs[j].Detail })
}

func collect[T any](ctx context.Context, pool *pgxpool.Pool, sql string, tenants []string, fn pgx.RowToFunc[T]) ([]T, error) {
	rows, err := pool.Query(ctx, sql, tenants)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, fn)
}

func scanEach(ctx context.Context, pool *pgxpool.Pool, sql string, tenants []string, fn func(pgx.Rows) error) error {
	rows, err := pool.Query(ctx, sql, tenants)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
