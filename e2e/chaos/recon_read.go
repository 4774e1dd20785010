package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
)

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
		AfterClose                                                    bool
	}
	periodRow struct {
		Tenant, Period, Status, CloseEventID string
	}
	invoiceRow struct {
		InvoiceID, Tenant, Period, Currency, Status, IssuedEventID string
		Number                                                     *int64
		Subtotal, Total                                            *decimal.Decimal
	}
	// invoiceChargeRow is invoice's copy of one ChargeRated.
	invoiceChargeRow struct {
		OriginEventID, ChargeID, Tenant, Period, Currency, Meter string
		PriceVersion                                             int64
		UnitPrice, Quantity, Amount                              decimal.Decimal
	}
	// lineRow is an invoice line (kind charge, adjustment or rounding) or
	// a correction note (kind correction). A charge line has no origin;
	// it aggregates the invoice_charge rows of its meter and version.
	lineRow struct {
		InvoiceID, OriginEventID, Kind string
		Amount                         decimal.Decimal
		// Charge lines only.
		Meter        string
		PriceVersion int64
		UnitPrice    decimal.Decimal
		Quantity     decimal.Decimal
		ChargeCount  int64
		// Corrections only: the InvoiceCorrectionIssued event.
		EventID string
	}
	closeRow struct {
		Tenant, Period, CloseEventID string
		Charges, Adjustments         int64
	}
	projectedRow struct {
		EventID, EventType, Tenant, OriginEventID, SubjectID, Currency, Meter string
		Quantity, Amount                                                      *decimal.Decimal
		Issued                                                                *issuedFigures // InvoiceIssued only
	}
	// issuedFigures are what an InvoiceIssued says of its invoice.
	issuedFigures struct {
		Number, ChargeLines, Charges, Adjustments int64
		Subtotal, Rounding                        decimal.Decimal
	}
	// billingEventRow is an event in billing's outbox, as its envelope
	// names its aggregate.
	billingEventRow struct {
		EventID, EventType, Tenant, AggregateType, AggregateID string
		AggregateVersion                                       int64
	}
	// sumKey names one of query's totals.
	sumKey struct{ tenant, kind, key string }
)

// snapshot is everything the reconciliation reads, for a set of tenants.
type snapshot struct {
	prices          []priceRow
	evidence        map[string]map[string]priceRow // service -> event id -> price
	facts           []factRow
	charges         []chargeRow
	adjustments     []adjustmentRow
	periods         []periodRow
	invoices        []invoiceRow
	invoiceCharges  []invoiceChargeRow
	lines           []lineRow // invoice_line
	corrections     []lineRow // invoice_correction
	closes          []closeRow
	projected       []projectedRow
	totals          map[sumKey]decimal.Decimal // query's folded totals plus unfolded deltas
	usageCounts     map[string]int64           // tenant -> usage events query counted
	outboxes        map[string]map[string]int  // service -> "type/event id" -> rows
	billingEnvelope []billingEventRow
}

// readSnapshot reads every database.
func readSnapshot(ctx context.Context, db map[string]*pgxpool.Pool, tenants []string) (*snapshot, error) {
	s := &snapshot{evidence: map[string]map[string]priceRow{}}
	steps := []struct {
		what string
		read func() error
	}{
		{"meter prices", func() (err error) { s.prices, err = readPrices(ctx, db["meter"], "price", tenants); return }},
		{"usage price evidence", func() error { return s.readEvidence(ctx, db, "usage", tenants) }},
		{"billing price evidence", func() error { return s.readEvidence(ctx, db, "billing", tenants) }},
		{"usage facts", func() (err error) { s.facts, err = readFacts(ctx, db["usage"], tenants); return }},
		{"charges", func() (err error) { s.charges, err = readCharges(ctx, db["billing"], tenants); return }},
		{"adjustments", func() (err error) { s.adjustments, err = readAdjustments(ctx, db["billing"], tenants); return }},
		{"billing periods", func() (err error) { s.periods, err = readPeriods(ctx, db["billing"], tenants); return }},
		{"billing's outbox envelopes", func() (err error) { s.billingEnvelope, err = readBillingEvents(ctx, db["billing"], tenants); return }},
		{"invoices", func() (err error) { s.invoices, err = readInvoices(ctx, db["invoice"], tenants); return }},
		{"invoice charges", func() (err error) { s.invoiceCharges, err = readInvoiceCharges(ctx, db["invoice"], tenants); return }},
		{"invoice lines", func() (err error) { s.lines, err = readLines(ctx, db["invoice"], tenants); return }},
		{"invoice corrections", func() (err error) { s.corrections, err = readCorrections(ctx, db["invoice"], tenants); return }},
		{"period closes", func() (err error) { s.closes, err = readCloses(ctx, db["invoice"], tenants); return }},
		{"query projection", func() (err error) { s.projected, err = readProjected(ctx, db["query"], tenants); return }},
		{"query totals", func() error { return s.readTotals(ctx, db["query"], tenants) }},
		{"outboxes", func() error { return s.readOutboxes(ctx, db, tenants) }},
	}
	for _, st := range steps {
		if err := st.read(); err != nil {
			return nil, fmt.Errorf("%s: %w", st.what, err)
		}
	}
	return s, nil
}

func readPrices(ctx context.Context, pool *pgxpool.Pool, table string, tenants []string) ([]priceRow, error) {
	return collect(ctx, pool, `
		SELECT tenant_id, meter_code, currency, version, unit_price::text, effective_at, event_id::text
		FROM `+table+` WHERE tenant_id = ANY($1) ORDER BY tenant_id, meter_code, currency, version`, tenants,
		func(row pgx.CollectableRow) (p priceRow, err error) {
			var up string
			err = row.Scan(&p.Tenant, &p.Meter, &p.Currency, &p.Version, &up, &p.EffectiveAt, &p.EventID)
			p.UnitPrice = dec(up)
			return
		})
}

func (s *snapshot) readEvidence(ctx context.Context, db map[string]*pgxpool.Pool, service string, tenants []string) error {
	rows, err := readPrices(ctx, db[service], "price_evidence", tenants)
	if err != nil {
		return err
	}
	s.evidence[service] = map[string]priceRow{}
	for _, p := range rows {
		s.evidence[service][p.EventID] = p
	}
	return nil
}

func readFacts(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]factRow, error) {
	return collect(ctx, pool, `
		SELECT tenant_id, source_system, source_event_id, usage_id::text, event_id::text, meter_code, currency,
		       quantity::text, occurred_at
		FROM usage_fact WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (f factRow, err error) {
			var q string
			err = row.Scan(&f.Tenant, &f.SourceSystem, &f.SourceEventID, &f.UsageID, &f.EventID, &f.Meter, &f.Currency,
				&q, &f.OccurredAt)
			f.Quantity = dec(q)
			return
		})
}

func readCharges(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]chargeRow, error) {
	return collect(ctx, pool, `
		SELECT charge_id::text, event_id::text, usage_event_id::text, usage_id::text, tenant_id, meter_code, currency,
		       period, quantity::text, unit_price::text, amount::text, price_version, late, occurred_at
		FROM charge WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (c chargeRow, err error) {
			var q, up, a string
			err = row.Scan(&c.ChargeID, &c.EventID, &c.UsageEventID, &c.UsageID, &c.Tenant, &c.Meter, &c.Currency,
				&c.Period, &q, &up, &a, &c.PriceVersion, &c.Late, &c.OccurredAt)
			c.Quantity, c.UnitPrice, c.Amount = dec(q), dec(up), dec(a)
			return
		})
}

func readAdjustments(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]adjustmentRow, error) {
	return collect(ctx, pool, `
		SELECT adjustment_id::text, event_id::text, tenant_id, correction_of::text, currency, period, amount::text, after_close
		FROM adjustment WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (a adjustmentRow, err error) {
			var amt string
			err = row.Scan(&a.AdjustmentID, &a.EventID, &a.Tenant, &a.CorrectionOf, &a.Currency, &a.Period, &amt, &a.AfterClose)
			a.Amount = dec(amt)
			return
		})
}

func readPeriods(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]periodRow, error) {
	return collect(ctx, pool, `
		SELECT tenant_id, period, status, coalesce(close_event_id::text, '') FROM billing_period WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (p periodRow, err error) {
			err = row.Scan(&p.Tenant, &p.Period, &p.Status, &p.CloseEventID)
			return
		})
}

// readBillingEvents reads the aggregate each of billing's events names in
// its envelope.
func readBillingEvents(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]billingEventRow, error) {
	return collect(ctx, pool, `
		SELECT event_id::text, event_type, envelope FROM outbox_event WHERE split_part(partition_key, '|', 1) = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (e billingEventRow, err error) {
			var raw []byte
			if err = row.Scan(&e.EventID, &e.EventType, &raw); err != nil {
				return
			}
			var env struct {
				TenantID         string `json:"tenantId"`
				AggregateType    string `json:"aggregateType"`
				AggregateID      string `json:"aggregateId"`
				AggregateVersion int64  `json:"aggregateVersion"`
			}
			if err = json.Unmarshal(raw, &env); err != nil {
				return e, fmt.Errorf("envelope of %s %s: %w", e.EventType, e.EventID, err)
			}
			e.Tenant, e.AggregateType, e.AggregateID, e.AggregateVersion = env.TenantID, env.AggregateType, env.AggregateID, env.AggregateVersion
			return
		})
}

func readInvoices(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]invoiceRow, error) {
	return collect(ctx, pool, `
		SELECT invoice_id::text, tenant_id, period, currency, status, coalesce(issued_event_id::text, ''),
		       number, subtotal::text, total::text
		FROM invoice WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (i invoiceRow, err error) {
			var sub, tot *string
			err = row.Scan(&i.InvoiceID, &i.Tenant, &i.Period, &i.Currency, &i.Status, &i.IssuedEventID, &i.Number, &sub, &tot)
			i.Subtotal, i.Total = decPtr(sub), decPtr(tot)
			return
		})
}

func readInvoiceCharges(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]invoiceChargeRow, error) {
	return collect(ctx, pool, `
		SELECT origin_event_id::text, charge_id::text, tenant_id, period, currency, meter_code, price_version,
		       unit_price::text, quantity::text, amount::text
		FROM invoice_charge WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (c invoiceChargeRow, err error) {
			var up, q, a string
			err = row.Scan(&c.OriginEventID, &c.ChargeID, &c.Tenant, &c.Period, &c.Currency, &c.Meter, &c.PriceVersion, &up, &q, &a)
			c.UnitPrice, c.Quantity, c.Amount = dec(up), dec(q), dec(a)
			return
		})
}

func readLines(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]lineRow, error) {
	return collect(ctx, pool, `
		SELECT l.invoice_id::text, coalesce(l.origin_event_id::text, ''), l.kind, l.amount::text,
		       coalesce(l.meter_code, ''), coalesce(l.price_version, 0), coalesce(l.unit_price, 0)::text,
		       coalesce(l.quantity, 0)::text, coalesce(l.charge_count, 0)
		FROM invoice_line l JOIN invoice i USING (invoice_id) WHERE i.tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (l lineRow, err error) {
			var a, up, q string
			err = row.Scan(&l.InvoiceID, &l.OriginEventID, &l.Kind, &a, &l.Meter, &l.PriceVersion, &up, &q, &l.ChargeCount)
			l.Amount, l.UnitPrice, l.Quantity = dec(a), dec(up), dec(q)
			return
		})
}

func readCorrections(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]lineRow, error) {
	return collect(ctx, pool, `
		SELECT c.invoice_id::text, c.origin_event_id::text, c.amount::text, c.event_id::text
		FROM invoice_correction c JOIN invoice i USING (invoice_id) WHERE i.tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (l lineRow, err error) {
			var a string
			err = row.Scan(&l.InvoiceID, &l.OriginEventID, &a, &l.EventID)
			l.Kind, l.Amount = "correction", dec(a)
			return
		})
}

func readCloses(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]closeRow, error) {
	return collect(ctx, pool, `
		SELECT tenant_id, period, close_event_id::text, charges, adjustments FROM period_close WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (c closeRow, err error) {
			err = row.Scan(&c.Tenant, &c.Period, &c.CloseEventID, &c.Charges, &c.Adjustments)
			return
		})
}

func readProjected(ctx context.Context, pool *pgxpool.Pool, tenants []string) ([]projectedRow, error) {
	return collect(ctx, pool, `
		SELECT event_id::text, event_type, tenant_id, coalesce(origin_event_id::text, ''), coalesce(subject_id::text, ''),
		       coalesce(currency, ''), coalesce(meter_code, ''), quantity::text, amount::text,
		       CASE WHEN event_type = 'InvoiceIssued' THEN payload END
		FROM projected_event WHERE tenant_id = ANY($1)`, tenants,
		func(row pgx.CollectableRow) (p projectedRow, err error) {
			var q, a *string
			var issued []byte
			err = row.Scan(&p.EventID, &p.EventType, &p.Tenant, &p.OriginEventID, &p.SubjectID, &p.Currency, &p.Meter, &q, &a, &issued)
			p.Quantity, p.Amount = decPtr(q), decPtr(a)
			if err == nil && issued != nil {
				p.Issued = &issuedFigures{}
				err = json.Unmarshal(issued, p.Issued)
			}
			return
		})
}

// readTotals reads query's totals as a summary read folds them: the folded
// totals plus the deltas not yet folded.
func (s *snapshot) readTotals(ctx context.Context, pool *pgxpool.Pool, tenants []string) error {
	s.totals, s.usageCounts = map[sumKey]decimal.Decimal{}, map[string]int64{}
	return scanEach(ctx, pool, `
		SELECT tenant_id, kind, key, amount::text, events FROM tenant_total WHERE tenant_id = ANY($1)
		UNION ALL
		SELECT tenant_id, kind, key, sum(amount)::text, sum(events)::bigint FROM summary_delta WHERE tenant_id = ANY($1)
		GROUP BY tenant_id, kind, key`, tenants,
		func(row pgx.Rows) error {
			var t, kind, key, a string
			var n int64
			if err := row.Scan(&t, &kind, &key, &a, &n); err != nil {
				return err
			}
			k := sumKey{t, kind, key}
			s.totals[k] = s.totals[k].Add(dec(a))
			if kind == "usage" {
				s.usageCounts[t] += n
			}
			return nil
		})
}

func (s *snapshot) readOutboxes(ctx context.Context, db map[string]*pgxpool.Pool, tenants []string) error {
	s.outboxes = map[string]map[string]int{}
	for _, service := range []string{"meter", "usage", "billing", "invoice"} {
		s.outboxes[service] = map[string]int{}
		if err := scanEach(ctx, db[service], `
			SELECT event_type, event_id::text FROM outbox_event WHERE split_part(partition_key, '|', 1) = ANY($1)`, tenants,
			func(row pgx.Rows) error {
				var t, id string
				if err := row.Scan(&t, &id); err != nil {
					return err
				}
				s.outboxes[service][t+"/"+id]++
				return nil
			}); err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
	}
	return nil
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func decPtr(s *string) *decimal.Decimal {
	if s == nil {
		return nil
	}
	d := dec(*s)
	return &d
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
