package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
)

// ReconcileStream is Reconcile for runs too large to hold in memory (the
// soak's millions of facts): the per-fact checks walk the ledger's
// accepted facts and the databases' rows side by side, each read in the
// order of its origin event id (a merge join over cursors), so the test
// process holds one row of each table at a time, never a table. What it
// keeps is small: the prices, adjustments, periods, invoices and their
// lines, and one sum per tenant, period and currency.
//
// It checks: every fact the client saw accepted is in usage's database
// once, as sent, and nothing else is; every usage fact has exactly one
// charge in billing, priced by the version in effect at its occurredAt,
// amount = quantity x unit price, in the period it occurred in; every
// usage fact and every charge is projected by query once; every charge is
// exactly one invoice_charge in invoice, as billing rated it, and invoice
// holds none billing did not rate; the prices, adjustments, closes,
// invoice totals (against billing's sums), adjustment lines and invoice
// numbers as Reconcile checks them. It does not check what Reconcile
// checks row by row beyond that: the charge lines' grouping, the billing
// events' aggregate versions, query's folded totals and the outboxes'
// completeness.
func ReconcileStream(ctx context.Context, db map[string]*pgxpool.Pool, tenants []string, ledger *Ledger) (*Reconciliation, error) {
	s := &snapshot{evidence: map[string]map[string]priceRow{}}
	steps := []struct {
		what string
		read func() error
	}{
		{"meter prices", func() (err error) { s.prices, err = readPrices(ctx, db["meter"], "price", tenants); return }},
		{"usage price evidence", func() error { return s.readEvidence(ctx, db, "usage", tenants) }},
		{"billing price evidence", func() error { return s.readEvidence(ctx, db, "billing", tenants) }},
		{"adjustments", func() (err error) { s.adjustments, err = readAdjustments(ctx, db["billing"], tenants); return }},
		{"billing periods", func() (err error) { s.periods, err = readPeriods(ctx, db["billing"], tenants); return }},
		{"invoices", func() (err error) { s.invoices, err = readInvoices(ctx, db["invoice"], tenants); return }},
		{"invoice lines", func() (err error) { s.lines, err = readLines(ctx, db["invoice"], tenants); return }},
		{"invoice corrections", func() (err error) { s.corrections, err = readCorrections(ctx, db["invoice"], tenants); return }},
		{"period closes", func() (err error) { s.closes, err = readCloses(ctx, db["invoice"], tenants); return }},
	}
	for _, st := range steps {
		if err := st.read(); err != nil {
			return nil, fmt.Errorf("%s: %w", st.what, err)
		}
	}
	rc := newReconcilerOf(tenants, ledger, s, false)
	rc.prices()
	rc.adjustmentsPosted()
	billed, counted := map[string]decimal.Decimal{}, map[string][2]int64{}
	if err := rc.streamFacts(ctx, db, ledger, billed, counted); err != nil {
		return nil, err
	}
	if err := rc.streamCharges(ctx, db); err != nil {
		return nil, err
	}
	for _, a := range s.adjustments {
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
	rc.adjustmentLines()
	if err := rc.invoiceTotalsOf(billed, counted); err != nil {
		return nil, err
	}
	rc.invoiceNumbers()
	r := rc.r
	r.Adjustments, r.InvoiceLines, r.Invoices, r.Prices = len(s.adjustments), len(s.lines), len(s.invoices), len(s.prices)
	sortFindings(r.Lost)
	sortFindings(r.Duplicated)
	sortFindings(r.Mismatch)
	return r, nil
}

// cursor reads a query's rows one at a time; key is the head row's
// origin event id (the order the query returns them in).
type cursor[T any] struct {
	rows pgx.Rows
	scan func(pgx.Rows) (T, string, error)
	head T
	key  string
	ok   bool
	err  error
}

func openCursor[T any](ctx context.Context, pool *pgxpool.Pool, sql string, tenants []string, scan func(pgx.Rows) (T, string, error)) (*cursor[T], error) {
	rows, err := pool.Query(ctx, sql, tenants)
	if err != nil {
		return nil, err
	}
	c := &cursor[T]{rows: rows, scan: scan}
	c.next()
	return c, c.err
}

func (c *cursor[T]) next() {
	if c.err == nil && c.rows.Next() {
		c.head, c.key, c.err = c.scan(c.rows)
		c.key = strings.ToLower(c.key)
		c.ok = c.err == nil
		return
	}
	c.ok = false
	if c.err == nil {
		c.err = c.rows.Err()
	}
}

// take returns the rows whose key is k and moves past them.
func (c *cursor[T]) take(k string) []T {
	var out []T
	for c.ok && c.key == k {
		out = append(out, c.head)
		c.next()
	}
	return out
}

func (c *cursor[T]) close() { c.rows.Close() }

// lowest returns the smallest of the keys present.
func lowest(keys ...*string) (string, bool) {
	var k string
	found := false
	for _, p := range keys {
		if p != nil && (!found || *p < k) {
			k, found = *p, true
		}
	}
	return k, found
}

func keyOf[T any](c *cursor[T]) *string {
	if !c.ok {
		return nil
	}
	return &c.key
}

// streamFacts walks the ledger's accepted facts, usage's facts, billing's
// charges and query's projected UsageAccepted events by usage event id,
// and sums the charges by tenant/period/currency into billed and counts
// them by tenant/period into counted.
func (rc *reconciler) streamFacts(ctx context.Context, db map[string]*pgxpool.Pool, ledger *Ledger, billed map[string]decimal.Decimal, counted map[string][2]int64) error {
	r := rc.r
	ledger.mu.Lock()
	var sent []*Fact
	for _, f := range ledger.order {
		if f.Accepted && rc.mine(f.Tenant) {
			sent = append(sent, f)
		}
	}
	ledger.mu.Unlock()
	slices.SortFunc(sent, func(a, b *Fact) int { return strings.Compare(strings.ToLower(a.EventID), strings.ToLower(b.EventID)) })

	facts, err := openCursor(ctx, db["usage"], `
		SELECT tenant_id, source_system, source_event_id, usage_id::text, event_id::text, meter_code, currency,
		       quantity::text, occurred_at
		FROM usage_fact WHERE tenant_id = ANY($1) ORDER BY event_id`, rc.tenants,
		func(row pgx.Rows) (f factRow, k string, err error) {
			var q string
			err = row.Scan(&f.Tenant, &f.SourceSystem, &f.SourceEventID, &f.UsageID, &f.EventID, &f.Meter, &f.Currency, &q, &f.OccurredAt)
			f.Quantity = dec(q)
			return f, f.EventID, err
		})
	if err != nil {
		return fmt.Errorf("usage facts: %w", err)
	}
	defer facts.close()
	charges, err := openCursor(ctx, db["billing"], `
		SELECT charge_id::text, event_id::text, usage_event_id::text, usage_id::text, tenant_id, meter_code, currency,
		       period, quantity::text, unit_price::text, amount::text, price_version, late, occurred_at
		FROM charge WHERE tenant_id = ANY($1) ORDER BY usage_event_id, event_id`, rc.tenants, scanCharge(true))
	if err != nil {
		return fmt.Errorf("charges: %w", err)
	}
	defer charges.close()
	projected, err := openCursor(ctx, db["query"], `
		SELECT event_id::text FROM projected_event WHERE tenant_id = ANY($1) AND event_type = '`+events.TypeUsageAccepted+`'
		ORDER BY event_id`, rc.tenants,
		func(row pgx.Rows) (id string, k string, err error) { err = row.Scan(&id); return id, id, err })
	if err != nil {
		return fmt.Errorf("query's projection: %w", err)
	}
	defer projected.close()

	i := 0
	for {
		var lk *string
		var lf *Fact
		if i < len(sent) {
			lf = sent[i]
			k := strings.ToLower(lf.EventID)
			lk = &k
		}
		k, more := lowest(lk, keyOf(facts), keyOf(charges), keyOf(projected))
		if !more {
			break
		}
		if lk == nil || *lk != k {
			lf = nil
		} else {
			i++
		}
		fs, cs, ps := facts.take(k), charges.take(k), projected.take(k)
		r.Facts += len(fs)
		r.Charges += len(cs)
		for _, c := range cs {
			bk := invoiceKey(c.Tenant, c.Period, c.Currency)
			billed[bk] = billed[bk].Add(c.Amount)
			n := counted[c.Tenant+"/"+c.Period]
			counted[c.Tenant+"/"+c.Period] = [2]int64{n[0] + 1, n[1]}
		}
		switch {
		case len(fs) == 0 && lf != nil:
			r.lost(k, "usage fact %s/%s was accepted (event %s) but is not in usage's database", lf.Tenant, lf.SourceEventID, lf.EventID)
			continue
		case len(fs) == 0:
			for _, c := range cs {
				r.dup(k, "charge %s (event %s) rates usage event %s, which is no usage fact", c.ChargeID, c.EventID, k)
			}
			if len(ps) > 0 {
				r.dup(k, "query projected UsageAccepted %s, which is no usage fact", k)
			}
			continue
		case len(fs) > 1:
			r.dup(k, "usage holds %d facts with event id %s", len(fs), k)
		}
		f := fs[0]
		if lf == nil {
			// Not accepted under this event id: a fact the load gave up on
			// (unresolved, its commit unknown) may be there; anything else
			// is not.
			ledger.mu.Lock()
			sf := ledger.facts[factKey(f.Tenant, f.SourceEventID)]
			ledger.mu.Unlock()
			switch {
			case sf == nil:
				r.dup(k, "usage fact %s (%s/%s/%s) was never sent", f.UsageID, f.Tenant, f.SourceSystem, f.SourceEventID)
			case sf.Accepted:
				r.mismatch(k, "usage fact %s/%s: database has usage %s event %s, the client was answered usage %s event %s",
					f.Tenant, f.SourceEventID, f.UsageID, f.EventID, sf.UsageID, sf.EventID)
			case !sf.Unresolved:
				r.mismatch(k, "usage fact %s/%s is in usage's database, but its request was never answered as accepted", f.Tenant, f.SourceEventID)
			}
		} else if f.SourceSystem != SourceSystem || f.Tenant != lf.Tenant || f.SourceEventID != lf.SourceEventID || f.UsageID != lf.UsageID || f.Meter != lf.Meter ||
			!f.Quantity.Equal(lf.Quantity) || !f.OccurredAt.Equal(lf.OccurredAt) {
			r.mismatch(k, "usage fact %s: %s/%s %s %s at %s; sent: %s/%s %s %s at %s (usage id %s)", f.UsageID, f.Tenant, f.SourceEventID,
				f.Meter, f.Quantity, f.OccurredAt.Format(time.RFC3339Nano), lf.Tenant, lf.SourceEventID, lf.Meter, lf.Quantity,
				lf.OccurredAt.Format(time.RFC3339Nano), lf.UsageID)
		}
		switch len(ps) {
		case 0:
			r.lost(k, "usage fact %s (UsageAccepted %s) is not in query's projection", f.UsageID, k)
		case 1:
		default:
			r.dup(k, "query projected UsageAccepted %s %d times", k, len(ps))
		}
		switch len(cs) {
		case 0:
			r.lost(k, "usage fact %s (%s/%s) has no charge", f.UsageID, f.Tenant, f.SourceEventID)
		case 1:
		default:
			var ids []string
			for _, c := range cs {
				ids = append(ids, c.ChargeID)
			}
			r.dup(k, "usage fact %s (%s/%s) has %d charges: %s", f.UsageID, f.Tenant, f.SourceEventID, len(cs), strings.Join(ids, ", "))
		}
		for _, c := range cs {
			rc.chargeRatesFact(c, f)
		}
	}
	return firstErr(facts.err, charges.err, projected.err)
}

func scanCharge(byUsage bool) func(pgx.Rows) (chargeRow, string, error) {
	return func(row pgx.Rows) (c chargeRow, k string, err error) {
		var q, up, a string
		err = row.Scan(&c.ChargeID, &c.EventID, &c.UsageEventID, &c.UsageID, &c.Tenant, &c.Meter, &c.Currency,
			&c.Period, &q, &up, &a, &c.PriceVersion, &c.Late, &c.OccurredAt)
		c.Quantity, c.UnitPrice, c.Amount = dec(q), dec(up), dec(a)
		if byUsage {
			return c, c.UsageEventID, err
		}
		return c, c.EventID, err
	}
}

// streamCharges walks billing's charges, invoice's copies of them and
// query's projected ChargeRated events by the charge's event id.
func (rc *reconciler) streamCharges(ctx context.Context, db map[string]*pgxpool.Pool) error {
	r := rc.r
	charges, err := openCursor(ctx, db["billing"], `
		SELECT charge_id::text, event_id::text, usage_event_id::text, usage_id::text, tenant_id, meter_code, currency,
		       period, quantity::text, unit_price::text, amount::text, price_version, late, occurred_at
		FROM charge WHERE tenant_id = ANY($1) ORDER BY event_id`, rc.tenants, scanCharge(false))
	if err != nil {
		return fmt.Errorf("charges: %w", err)
	}
	defer charges.close()
	copies, err := openCursor(ctx, db["invoice"], `
		SELECT origin_event_id::text, charge_id::text, tenant_id, period, currency, meter_code, price_version,
		       unit_price::text, quantity::text, amount::text
		FROM invoice_charge WHERE tenant_id = ANY($1) ORDER BY origin_event_id`, rc.tenants,
		func(row pgx.Rows) (c invoiceChargeRow, k string, err error) {
			var up, q, a string
			err = row.Scan(&c.OriginEventID, &c.ChargeID, &c.Tenant, &c.Period, &c.Currency, &c.Meter, &c.PriceVersion, &up, &q, &a)
			c.UnitPrice, c.Quantity, c.Amount = dec(up), dec(q), dec(a)
			return c, c.OriginEventID, err
		})
	if err != nil {
		return fmt.Errorf("invoice charges: %w", err)
	}
	defer copies.close()
	projected, err := openCursor(ctx, db["query"], `
		SELECT event_id::text, event_type, tenant_id, coalesce(origin_event_id::text, ''), coalesce(subject_id::text, ''),
		       coalesce(currency, ''), coalesce(meter_code, ''), quantity::text, amount::text
		FROM projected_event WHERE tenant_id = ANY($1) AND event_type = '`+events.TypeChargeRated+`' ORDER BY event_id`, rc.tenants,
		func(row pgx.Rows) (p projectedRow, k string, err error) {
			var q, a *string
			err = row.Scan(&p.EventID, &p.EventType, &p.Tenant, &p.OriginEventID, &p.SubjectID, &p.Currency, &p.Meter, &q, &a)
			p.Quantity, p.Amount = decPtr(q), decPtr(a)
			return p, p.EventID, err
		})
	if err != nil {
		return fmt.Errorf("query's projection: %w", err)
	}
	defer projected.close()
	for {
		k, more := lowest(keyOf(charges), keyOf(copies), keyOf(projected))
		if !more {
			break
		}
		cs, ics, ps := charges.take(k), copies.take(k), projected.take(k)
		r.InvoiceCharges += len(ics)
		r.Projected += len(ps)
		if len(cs) == 0 {
			for _, ic := range ics {
				r.dup(k, "invoice holds charge %s of ChargeRated %s (%s %s %s), which billing never rated", ic.ChargeID, k, ic.Tenant, ic.Period, ic.Amount)
			}
			if len(ps) > 0 {
				r.dup(k, "query projected ChargeRated %s, which billing never rated", k)
			}
			continue
		}
		if len(cs) > 1 {
			r.dup(k, "billing holds %d charges with event id %s", len(cs), k)
		}
		c := cs[0]
		switch len(ics) {
		case 0:
			r.lost(k, "charge %s (ChargeRated %s, %s %s %s) is not in invoice's charges", c.ChargeID, k, c.Tenant, c.Period, c.Amount)
		case 1:
			ic := ics[0]
			if ic.ChargeID != c.ChargeID || ic.Tenant != c.Tenant || ic.Period != c.Period || ic.Currency != c.Currency ||
				ic.Meter != c.Meter || ic.PriceVersion != c.PriceVersion || !ic.UnitPrice.Equal(c.UnitPrice) ||
				!ic.Quantity.Equal(c.Quantity) || !ic.Amount.Equal(c.Amount) {
				r.mismatch(k, "invoice's copy of charge %s (ChargeRated %s): %s %s %s %s v%d %s x %s = %s; billing: %s %s %s %s v%d %s x %s = %s",
					c.ChargeID, k, ic.Tenant, ic.Period, ic.Currency, ic.Meter, ic.PriceVersion, ic.Quantity, ic.UnitPrice, ic.Amount,
					c.Tenant, c.Period, c.Currency, c.Meter, c.PriceVersion, c.Quantity, c.UnitPrice, c.Amount)
			}
		default:
			r.dup(k, "invoice holds %d copies of charge %s (ChargeRated %s)", len(ics), c.ChargeID, k)
		}
		switch len(ps) {
		case 0:
			r.lost(k, "charge %s (ChargeRated %s) is not in query's projection", c.ChargeID, k)
		case 1:
			if p := ps[0]; p.Amount == nil || !p.Amount.Equal(c.Amount) || p.Tenant != c.Tenant {
				r.mismatch(k, "query's projection of ChargeRated %s: %s %v; billing: %s %s", k, p.Tenant, p.Amount, c.Tenant, c.Amount)
			}
		default:
			r.dup(k, "query projected ChargeRated %s %d times", k, len(ps))
		}
	}
	return firstErr(charges.err, copies.err, projected.err)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
