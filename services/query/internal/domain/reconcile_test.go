package domain_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// flow builds a healthy tenant: usage u1 (Nov) and u2 (Oct, rated late
// into Nov), their charges, an adjustment invoiced as a line and one as a
// correction note of the issued Nov invoice, all projected by query.
type flow struct {
	u1, u2, c1, c2, a1, a2 uuid.UUID
	inv                    uuid.UUID
	src                    sources
}

// rows are what a service holds of the tenant.
type rows struct {
	UsageFacts   []recon.UsageFact
	Charges      []recon.Charge
	Adjustments  []recon.Adjustment
	InvoiceLines []recon.InvoiceLine
	LineTotals   []recon.LineTotal
	Corrections  []recon.Correction
	Invoices     []recon.Invoice
}

type sources struct {
	Usage, Billing, Invoice, Query rows
	Prices                         []recon.Price // meter's
	Observations                   []domain.ChargeObservation
}

// streams are the sets the services serve of a period's reconciliation, as
// their queries scope them.
func (s sources) streams(period string) domain.Sources {
	// Usage groups facts by the UTC month they occurred in; billing serves
	// the period's charges and the off-month ones (rated into another
	// period than that month) of the month, and names their months.
	utcMonth := map[uuid.UUID]string{}
	for _, u := range s.Usage.UsageFacts {
		utcMonth[u.EventID] = u.Period
	}
	months := map[string]bool{period: true}
	var charges []recon.Charge
	for _, c := range s.Billing.Charges {
		m, ok := utcMonth[c.UsageEventID]
		if !ok {
			m = c.Period
		}
		if c.Period == period || (m == period && c.Period != m) {
			charges = append(charges, c)
		}
		if c.Period != m && (c.Period == period || m == period) {
			months[c.Period], months[m] = true, true
		}
	}
	inMonths := func(p string) bool { return months[p] }
	is := func(p string) bool { return p == period }
	var counted, lines []recon.InvoiceLine
	for _, l := range s.Invoice.InvoiceLines {
		if l.Kind == "charge" || l.Kind == "unpriced" { // lines that count charges
			counted = append(counted, l)
		} else {
			lines = append(lines, l)
		}
	}
	return domain.Sources{
		UsageFacts:     recon.Rows(where(s.Usage.UsageFacts, func(u recon.UsageFact) bool { return inMonths(u.Period) })),
		Charges:        recon.Rows(charges),
		InvoiceCharges: recon.Rows(where(counted, func(l recon.InvoiceLine) bool { return inMonths(l.Period) })),
		QueryUsage:     recon.Rows(where(s.Query.UsageFacts, func(u recon.UsageFact) bool { return inMonths(u.Period) })),
		QueryCharges:   recon.Rows(where(s.Query.Charges, func(c recon.Charge) bool { return inMonths(c.Period) })),

		Adjustments:      recon.Rows(where(s.Billing.Adjustments, func(a recon.Adjustment) bool { return is(a.Period) })),
		InvoiceLines:     recon.Rows(where(lines, func(l recon.InvoiceLine) bool { return inMonths(l.Period) })),
		Corrections:      recon.Rows(where(s.Invoice.Corrections, func(c recon.Correction) bool { return is(c.Period) })),
		QueryAdjustments: recon.Rows(where(s.Query.Adjustments, func(a recon.Adjustment) bool { return is(a.Period) })),
		QueryCorrections: recon.Rows(where(s.Query.Corrections, func(c recon.Correction) bool { return is(c.Period) })),

		LineTotals:    recon.Rows(s.Invoice.LineTotals),
		QueryInvoices: recon.Rows(where(s.Query.Invoices, func(i recon.Invoice) bool { return is(i.Period) })),
		Prices:        recon.Rows(s.Prices),

		QueryObservations: recon.Rows(s.Observations),
	}
}

func where[T any](s []T, keep func(T) bool) []T {
	var out []T
	for _, v := range s {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func reconcile(t *testing.T, period string, src sources) domain.Report {
	t.Helper()
	rep, err := domain.Reconcile(t.Context(), "acme", period, src.streams(period))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func healthy() *flow {
	f := &flow{u1: uuid.New(), u2: uuid.New(), c1: uuid.New(), c2: uuid.New(), a1: uuid.New(), a2: uuid.New(), inv: uuid.New()}
	f.src.Usage.UsageFacts = []recon.UsageFact{
		{EventID: f.u1, UsageID: uuid.New(), Quantity: d("10"), Period: "2026-11"},
		{EventID: f.u2, UsageID: uuid.New(), Quantity: d("5"), Period: "2026-10"},
	}
	f.src.Billing.Charges = []recon.Charge{
		{EventID: f.c1, UsageEventID: f.u1, Currency: "USD", Quantity: d("10"), Amount: d("1.0"), Period: "2026-11", OccurredPeriod: "2026-11"},
		{EventID: f.c2, UsageEventID: f.u2, Currency: "USD", Quantity: d("5"), Amount: d("0.5"), Period: "2026-11", OccurredPeriod: "2026-10",
			Late: true},
	}
	f.src.Billing.Adjustments = []recon.Adjustment{
		{EventID: f.a1, Currency: "USD", Amount: d("-0.2"), Period: "2026-11"},
		{EventID: f.a2, Currency: "USD", Amount: d("0.1"), Period: "2026-11"},
	}
	f.src.Invoice.InvoiceLines = []recon.InvoiceLine{
		{InvoiceID: f.inv, Issued: true, Period: "2026-11", Currency: "USD", OriginEventID: f.c1, UsageEventID: f.u1, Kind: "charge", Amount: d("1"),
			Quantity: d("10"), LineID: "charge/api_calls/1"},
		{InvoiceID: f.inv, Issued: true, Period: "2026-11", Currency: "USD", OriginEventID: f.c2, UsageEventID: f.u2, Kind: "charge", Amount: d("0.50"),
			Quantity: d("5"), LineID: "charge/api_calls/1"},
		{InvoiceID: f.inv, Issued: true, Period: "2026-11", Currency: "USD", OriginEventID: f.a1, Kind: "adjustment", Amount: d("-0.2"),
			LineID: "adjustment/" + f.a1.String()},
		{InvoiceID: f.inv, Issued: true, Period: "2026-11", Currency: "USD", OriginEventID: uuid.New(), Kind: "rounding", Amount: d("0"),
			LineID: "rounding"},
	}
	f.src.Invoice.LineTotals = []recon.LineTotal{
		{InvoiceID: f.inv, Currency: "USD", LineID: "charge/api_calls/1", Kind: "charge", MeterCode: "api_calls", PriceVersion: 1,
			Quantity: d("15"), ChargeCount: 2, Amount: d("1.5")},
		{InvoiceID: f.inv, LineID: "adjustment/" + f.a1.String(), Kind: "adjustment", Amount: d("-0.2")},
		{InvoiceID: f.inv, LineID: "rounding", Kind: "rounding", Amount: d("0")},
	}
	f.src.Invoice.Corrections = []recon.Correction{{InvoiceID: f.inv, Period: "2026-11", OriginEventID: f.a2, Amount: d("0.1")}}
	f.src.Prices = []recon.Price{{PriceID: uuid.New(), MeterCode: "api_calls", Currency: "USD", Version: 1,
		Pricing: pricing.UnitPricing(d("0.1"))}}
	f.src.Query = rows{ // copies: the projection is its own data
		UsageFacts:  slices.Clone(f.src.Usage.UsageFacts),
		Charges:     slices.Clone(f.src.Billing.Charges),
		Adjustments: slices.Clone(f.src.Billing.Adjustments),
		Corrections: slices.Clone(f.src.Invoice.Corrections),
		Invoices:    []recon.Invoice{{InvoiceID: f.inv, Period: "2026-11", Currency: "USD", Total: d("1.3")}},
	}
	return f
}

func TestReconcileHealthy(t *testing.T) {
	f := healthy()
	rep := reconcile(t, "2026-11", f.src)
	if len(rep.Mismatches) != 0 || rep.MismatchCount != 0 {
		t.Fatalf("mismatches %+v", rep.Mismatches)
	}
	want := domain.Counts{UsageFacts: 2, Charges: 2, InvoiceLines: 4, QueryUsage: 2}
	if rep.Counts != want {
		t.Fatalf("counts %+v, want %+v", rep.Counts, want)
	}
	// October: u2 occurred then; its charge (rated into November) is found.
	if rep := reconcile(t, "2026-10", f.src); len(rep.Mismatches) != 0 || rep.Counts.UsageFacts != 1 || rep.Counts.Charges != 1 {
		t.Fatalf("October: %+v", rep)
	}
}

func TestReconcileNamesEveryMismatch(t *testing.T) {
	type want struct {
		kind string
		id   func(*flow) uuid.UUID
	}
	tests := []struct {
		name   string
		break_ func(*flow)
		want   []want
	}{
		{"usage without charge", func(f *flow) {
			f.src.Billing.Charges = f.src.Billing.Charges[1:]
			f.src.Query.Charges = f.src.Query.Charges[1:]
		}, []want{{domain.MismatchMissingCharge, func(f *flow) uuid.UUID { return f.u1 }},
			{domain.MismatchLineWithoutOrigin, func(f *flow) uuid.UUID { return f.c1 }}}},
		{"two charges", func(f *flow) {
			extra := recon.Charge{EventID: uuid.New(), UsageEventID: f.u1, Currency: "USD", Quantity: d("10"), Amount: d("1"), Period: "2026-11"}
			f.src.Billing.Charges = append(f.src.Billing.Charges, extra)
			f.src.Query.Charges = append(f.src.Query.Charges, extra)
			f.src.Invoice.InvoiceLines = append(f.src.Invoice.InvoiceLines, recon.InvoiceLine{InvoiceID: f.inv, Issued: false,
				Period: "2026-11", OriginEventID: extra.EventID, UsageEventID: f.u1, Kind: "charge", Amount: d("1")})
		}, []want{{domain.MismatchDuplicateCharge, func(f *flow) uuid.UUID { return f.u1 }}}},
		{"charge moved to another period", func(f *flow) {
			f.src.Billing.Charges[0].Period = "2026-12"
		}, []want{{domain.MismatchChargePeriod, func(f *flow) uuid.UUID { return f.c1 }},
			{domain.MismatchChargePeriod, func(f *flow) uuid.UUID { return f.c1 }}}},
		{"late charge into an earlier period", func(f *flow) {
			f.src.Billing.Charges[1].OccurredPeriod = "2026-12"
		}, []want{{domain.MismatchChargePeriod, func(f *flow) uuid.UUID { return f.c2 }}}},
		{"charge of unknown usage", func(f *flow) {
			f.src.Usage.UsageFacts = f.src.Usage.UsageFacts[1:]
			f.src.Query.UsageFacts = f.src.Query.UsageFacts[1:]
		}, []want{{domain.MismatchChargeWithoutUsage, func(f *flow) uuid.UUID { return f.c1 }}}},
		{"charge not invoiced", func(f *flow) {
			f.src.Invoice.InvoiceLines = f.src.Invoice.InvoiceLines[1:]
		}, []want{{domain.MismatchMissingInvoiceLine, func(f *flow) uuid.UUID { return f.c1 }},
			{domain.MismatchLineTotal, func(f *flow) uuid.UUID { return f.inv }}}},
		{"adjustment not invoiced", func(f *flow) {
			f.src.Invoice.Corrections = nil
			f.src.Query.Corrections = nil
		}, []want{{domain.MismatchMissingInvoiceLine, func(f *flow) uuid.UUID { return f.a2 }}}},
		{"line amount differs", func(f *flow) {
			f.src.Invoice.InvoiceLines[0].Amount = d("1.01")
		}, []want{{domain.MismatchAmount, func(f *flow) uuid.UUID { return f.c1 }},
			{domain.MismatchLineTotal, func(f *flow) uuid.UUID { return f.inv }}}},
		{"line total differs from what it counts", func(f *flow) {
			f.src.Invoice.LineTotals[0].Quantity = d("16")
		}, []want{{domain.MismatchLineTotal, func(f *flow) uuid.UUID { return f.inv }}}},
		{"line priced by a version meter does not hold", func(f *flow) {
			f.src.Prices = nil
		}, []want{{domain.MismatchLineTotal, func(f *flow) uuid.UUID { return f.inv }}}},
		{"line amount not its version's pricing", func(f *flow) {
			f.src.Prices[0].Pricing = pricing.UnitPricing(d("0.11"))
		}, []want{{domain.MismatchLineTotal, func(f *flow) uuid.UUID { return f.inv }}}},
		{"a graduated line: its charges have no amounts, its pricing gives the line's", func(f *flow) {
			// 15 units: the first 10 at 0.1, the rest at 0.05 -> 1.25.
			ten := d("10")
			f.src.Prices[0].Pricing = pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
				{UpTo: &ten, UnitPrice: d("0.1")}, {UnitPrice: d("0.05")}}}
			zero := func(cs []recon.Charge) {
				for i := range cs {
					cs[i].Amount = decimal.Zero
				}
			}
			zero(f.src.Billing.Charges)
			zero(f.src.Query.Charges)
			f.src.Invoice.InvoiceLines[0].Amount, f.src.Invoice.InvoiceLines[1].Amount = decimal.Zero, decimal.Zero
			f.src.Invoice.LineTotals[0].Amount = d("1.25")
			f.src.Query.Invoices[0].Total = d("1.05")
		}, nil},
		{"a graduated line priced wrong", func(f *flow) {
			ten := d("10")
			f.src.Prices[0].Pricing = pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
				{UpTo: &ten, UnitPrice: d("0.1")}, {UnitPrice: d("0.05")}}}
		}, []want{{domain.MismatchLineTotal, func(f *flow) uuid.UUID { return f.inv }}}},
		{"query lacks the issued invoice", func(f *flow) {
			f.src.Query.Invoices = nil
		}, []want{{domain.MismatchMissingInQuery, func(f *flow) uuid.UUID { return f.inv }}}},
		{"query's invoice total differs", func(f *flow) {
			f.src.Query.Invoices[0].Total = d("1.31")
		}, []want{{domain.MismatchQueryAmount, func(f *flow) uuid.UUID { return f.inv }}}},
		{"charge quantity differs", func(f *flow) {
			f.src.Usage.UsageFacts[0].Quantity = d("11")
			f.src.Query.UsageFacts = []recon.UsageFact{f.src.Usage.UsageFacts[0], f.src.Usage.UsageFacts[1]}
		}, []want{{domain.MismatchAmount, func(f *flow) uuid.UUID { return f.u1 }}}},
		{"query lacks a charge", func(f *flow) {
			f.src.Query.Charges = f.src.Query.Charges[1:]
		}, []want{{domain.MismatchMissingInQuery, func(f *flow) uuid.UUID { return f.c1 }}}},
		{"query lacks a usage fact and has another", func(f *flow) {
			ghost := recon.UsageFact{EventID: uuid.New(), Quantity: d("1"), Period: "2026-11"}
			f.src.Query.UsageFacts = []recon.UsageFact{f.src.Usage.UsageFacts[1], ghost}
		}, []want{{domain.MismatchMissingInQuery, func(f *flow) uuid.UUID { return f.u1 }},
			{domain.MismatchUnknownInQuery, func(f *flow) uuid.UUID { return f.src.Query.UsageFacts[1].EventID }}}},
		{"open invoice lines are not expected in query", func(f *flow) {
			for i := range f.src.Invoice.InvoiceLines {
				f.src.Invoice.InvoiceLines[i].Issued = false
			}
			f.src.Query.Invoices = nil
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthy()
			tt.break_(f)
			rep := reconcile(t, "2026-11", f.src)
			if len(rep.Mismatches) != len(tt.want) || rep.MismatchCount != len(tt.want) {
				t.Fatalf("mismatches %+v, want %d", rep.Mismatches, len(tt.want))
			}
			for _, w := range tt.want {
				found := false
				for _, m := range rep.Mismatches {
					found = found || (m.Kind == w.kind && m.OriginEventID == w.id(f) && m.Detail != "")
				}
				if !found {
					t.Errorf("no %s for %s in %+v", w.kind, w.id(f), rep.Mismatches)
				}
			}
		})
	}
}

// A reconciliation of any volume lists at most MaxMismatches and counts
// them all.
func TestReconcileBoundsTheList(t *testing.T) {
	var src sources
	for range 1200 {
		src.Usage.UsageFacts = append(src.Usage.UsageFacts, recon.UsageFact{EventID: uuid.New(), UsageID: uuid.New(), Quantity: d("1"), Period: "2026-11"})
	}
	rep := reconcile(t, "2026-11", src)
	if len(rep.Mismatches) != domain.MaxMismatches || rep.MismatchCount != 2400 || rep.Counts.UsageFacts != 1200 {
		t.Fatalf("%d listed, %d counted, counts %+v; want %d listed of 2400 (no charge, not projected)",
			len(rep.Mismatches), rep.MismatchCount, rep.Counts, domain.MaxMismatches)
	}
}

// seoul builds a healthy tenant in Asia/Seoul (UTC+9): periods begin at
// 15:00 UTC on the last day of the UTC month before. Usage on both sides of
// the October/November and November/December boundaries: uA at 20:00 UTC
// on 31 October (a UTC October fact of Seoul November), uB in mid November,
// uC at 20:00 UTC on 30 November (a UTC November fact of Seoul December),
// uD at 10:00 UTC on 31 October (Seoul October). Each period has its
// invoice (November's issued).
type seoulFlow struct {
	uA, uB, uC, uD, cA, cB, cC, cD uuid.UUID
	inv10, inv11, inv12            uuid.UUID
	src                            sources
}

func seoul() *seoulFlow {
	f := &seoulFlow{uA: uuid.New(), uB: uuid.New(), uC: uuid.New(), uD: uuid.New(), cA: uuid.New(), cB: uuid.New(),
		cC: uuid.New(), cD: uuid.New(), inv10: uuid.New(), inv11: uuid.New(), inv12: uuid.New()}
	type fact struct {
		usage, charge, invoice uuid.UUID
		utcMonth, period       string
		qty                    string
	}
	facts := []fact{
		{f.uA, f.cA, f.inv11, "2026-10", "2026-11", "1"},
		{f.uB, f.cB, f.inv11, "2026-11", "2026-11", "2"},
		{f.uC, f.cC, f.inv12, "2026-11", "2026-12", "4"},
		{f.uD, f.cD, f.inv10, "2026-10", "2026-10", "8"},
	}
	totals := map[uuid.UUID]decimal.Decimal{}
	quantities := map[uuid.UUID]decimal.Decimal{}
	counts := map[uuid.UUID]int64{}
	for _, x := range facts {
		q := d(x.qty)
		amount := q.Mul(d("0.1"))
		f.src.Usage.UsageFacts = append(f.src.Usage.UsageFacts, recon.UsageFact{EventID: x.usage, UsageID: uuid.New(),
			MeterCode: "api_calls", Quantity: q, Period: x.utcMonth})
		f.src.Billing.Charges = append(f.src.Billing.Charges, recon.Charge{EventID: x.charge, UsageEventID: x.usage,
			Currency: "USD", Quantity: q, Amount: amount, Period: x.period, OccurredPeriod: x.period})
		f.src.Invoice.InvoiceLines = append(f.src.Invoice.InvoiceLines, recon.InvoiceLine{InvoiceID: x.invoice,
			Issued: x.invoice == f.inv11, Period: x.period, Currency: "USD", OriginEventID: x.charge, UsageEventID: x.usage,
			Kind: "charge", Amount: amount, Quantity: q, LineID: "charge/api_calls/1"})
		totals[x.invoice] = totals[x.invoice].Add(amount)
		quantities[x.invoice] = quantities[x.invoice].Add(q)
		counts[x.invoice]++
	}
	for _, inv := range []uuid.UUID{f.inv10, f.inv11, f.inv12} {
		f.src.Invoice.LineTotals = append(f.src.Invoice.LineTotals, recon.LineTotal{InvoiceID: inv, Currency: "USD",
			LineID: "charge/api_calls/1", Kind: "charge", MeterCode: "api_calls", PriceVersion: 1,
			Quantity: quantities[inv], ChargeCount: counts[inv], Amount: totals[inv]})
	}
	f.src.Prices = []recon.Price{{PriceID: uuid.New(), MeterCode: "api_calls", Currency: "USD", Version: 1,
		Pricing: pricing.UnitPricing(d("0.1"))}}
	f.src.Query = rows{
		UsageFacts: slices.Clone(f.src.Usage.UsageFacts),
		Charges:    slices.Clone(f.src.Billing.Charges),
		Invoices:   []recon.Invoice{{InvoiceID: f.inv11, Period: "2026-11", Currency: "USD", Total: totals[f.inv11]}},
	}
	for i := range f.src.Query.Charges { // query's set carries neither
		f.src.Query.Charges[i].OccurredPeriod, f.src.Query.Charges[i].Late = "", false
	}
	return f
}

// A tenant in another time zone: usage rated into the neighbouring period of
// its UTC month reconciles without a mismatch in every period, and the
// breaks a UTC tenant's reconciliation names are named.
func TestReconcileTenantInAnotherZone(t *testing.T) {
	for _, p := range []string{"2026-10", "2026-11", "2026-12"} {
		if rep := reconcile(t, p, seoul().src); rep.MismatchCount != 0 {
			t.Errorf("%s: mismatches %+v", p, rep.Mismatches)
		}
	}
	if rep := reconcile(t, "2026-11", seoul().src); rep.Counts.UsageFacts != 3 || rep.Counts.Charges != 3 {
		t.Errorf("November counts %+v: want uA (rated into it), uB, uC (occurred in UTC November) and their charges", rep.Counts)
	}
	type want struct {
		period, kind string
		id           func(*seoulFlow) uuid.UUID
	}
	tests := []struct {
		name   string
		break_ func(*seoulFlow)
		want   []want
	}{
		{"the charge of a fact from the month before deleted", func(f *seoulFlow) {
			f.src.Billing.Charges = f.src.Billing.Charges[1:]
		}, []want{
			{"2026-10", domain.MismatchMissingCharge, func(f *seoulFlow) uuid.UUID { return f.uA }},
			{"2026-11", domain.MismatchLineWithoutOrigin, func(f *seoulFlow) uuid.UUID { return f.cA }},
		}},
		{"a fact rated into the period after charged twice", func(f *seoulFlow) {
			extra := recon.Charge{EventID: uuid.New(), UsageEventID: f.uC, Currency: "USD", Quantity: d("4"), Amount: d("0.4"),
				Period: "2026-12", OccurredPeriod: "2026-12"}
			f.src.Billing.Charges = append(f.src.Billing.Charges, extra)
		}, []want{{"2026-11", domain.MismatchDuplicateCharge, func(f *seoulFlow) uuid.UUID { return f.uC }}}},
		{"a wrong amount", func(f *seoulFlow) {
			f.src.Billing.Charges[2].Amount = d("0.41")
		}, []want{{"2026-12", domain.MismatchAmount, func(f *seoulFlow) uuid.UUID { return f.cC }}}},
		{"a charge in the UTC month instead of the tenant's period", func(f *seoulFlow) {
			f.src.Billing.Charges[0].Period = "2026-10"
		}, []want{{"2026-10", domain.MismatchChargePeriod, func(f *seoulFlow) uuid.UUID { return f.cA }}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := seoul()
			tt.break_(f)
			for _, w := range tt.want {
				rep := reconcile(t, w.period, f.src)
				found := false
				for _, m := range rep.Mismatches {
					found = found || (m.Kind == w.kind && m.OriginEventID == w.id(f))
				}
				if !found {
					t.Errorf("%s: no %s for %s in %+v", w.period, w.kind, w.id(f), rep.Mismatches)
				}
			}
		})
	}
}

// A line of a max meter: its quantity is the largest of its charges' (10,
// not their sum 15), priced as a whole; the charges have no amount of their
// own. The line as the invoice shows it is checked against that, and a line
// showing the sum is a mismatch. An unpriced line is the same with no amount.
func TestReconcileAggregatedLines(t *testing.T) {
	aggregated := func(kind string, lineQty string) *flow {
		f := healthy()
		for i := range f.src.Billing.Charges {
			f.src.Billing.Charges[i].Amount = d("0")
		}
		f.src.Query.Charges = slices.Clone(f.src.Billing.Charges)
		at := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
		f.src.Observations = []domain.ChargeObservation{
			{EventID: f.c1, UsageEventID: f.u1, Aggregation: catalog.Max, Observation: catalog.Observation{Quantity: d("10"), OccurredAt: at}},
			{EventID: f.c2, UsageEventID: f.u2, Aggregation: catalog.Max, Observation: catalog.Observation{Quantity: d("5"), OccurredAt: at}},
		}
		slices.SortFunc(f.src.Observations, func(a, b domain.ChargeObservation) int { return a.Pos().Compare(b.Pos()) })
		amount := d("1")
		if kind == "unpriced" {
			amount = d("0")
		}
		for i := range f.src.Invoice.InvoiceLines {
			if l := &f.src.Invoice.InvoiceLines[i]; l.Kind == "charge" {
				l.Amount, l.Kind = d("0"), kind
			}
		}
		f.src.Invoice.LineTotals[0].Kind, f.src.Invoice.LineTotals[0].Quantity, f.src.Invoice.LineTotals[0].Amount = kind, d(lineQty), amount
		if kind == "unpriced" {
			f.src.Invoice.LineTotals[0].PriceVersion = 0
		}
		f.src.Query.Invoices[0].Total = amount.Add(d("-0.2"))
		return f
	}
	for _, kind := range []string{"charge", "unpriced"} {
		if rep := reconcile(t, "2026-11", aggregated(kind, "10").src); rep.MismatchCount != 0 {
			t.Fatalf("%s line of max 10: %+v", kind, rep.Mismatches)
		}
		rep := reconcile(t, "2026-11", aggregated(kind, "15").src)
		if rep.MismatchCount != 1 || rep.Mismatches[0].Kind != domain.MismatchLineTotal {
			t.Fatalf("%s line showing the sum 15: %+v, want one %s", kind, rep.Mismatches, domain.MismatchLineTotal)
		}
	}
}

// Fixed-fee and true-up lines are held to the plan version meter holds: a
// fee prorated by the line's days, a true-up no more than the minimum
// spend prorated the same way; every other figure is a mismatch.
func TestReconcileFeeLines(t *testing.T) {
	withFees := func(fee, trueUp string, feeCode string) *flow {
		f := healthy()
		minimum := d("62")
		f.src.Prices = append(f.src.Prices, recon.Price{PriceID: uuid.New(), PlanCode: "pro", Currency: "USD", Version: 1,
			FixedFees: []recon.PlanFee{{Code: "base", Amount: d("31")}}, MinimumSpend: &minimum})
		f.src.Invoice.LineTotals = append(f.src.Invoice.LineTotals,
			recon.LineTotal{InvoiceID: f.inv, Currency: "USD", LineID: "fixed_fee/pro/1/" + feeCode, Kind: "fixed_fee",
				PlanCode: "pro", PlanVersion: 1, FeeCode: feeCode, Days: 15, PeriodDays: 30, Amount: d(fee)},
			recon.LineTotal{InvoiceID: f.inv, Currency: "USD", LineID: "minimum_true_up/pro/1", Kind: "minimum_true_up",
				PlanCode: "pro", PlanVersion: 1, Days: 15, PeriodDays: 30, Amount: d(trueUp)})
		total := d("1.3").Add(d(fee)).Add(d(trueUp))
		f.src.Query.Invoices[0].Total = total
		return f
	}
	if rep := reconcile(t, "2026-11", withFees("15.5", "14", "base").src); len(rep.Mismatches) != 0 {
		t.Fatalf("healthy fee lines: %+v", rep.Mismatches)
	}
	for name, f := range map[string]*flow{
		"a fee off by a cent":          withFees("15.51", "14", "base"),
		"a fee the plan does not have": withFees("15.5", "14", "setup"),
		"a true-up past the minimum":   withFees("15.5", "31.01", "base"),
	} {
		rep := reconcile(t, "2026-11", f.src)
		if len(rep.Mismatches) != 1 || rep.Mismatches[0].Kind != domain.MismatchLineTotal {
			t.Errorf("%s: mismatches %+v, want one %s", name, rep.Mismatches, domain.MismatchLineTotal)
		}
	}
}

// A tax line is held to its rate times its invoice's rounded subtotal (its
// other lines), rounded half-even; a tax line without its rate is a
// mismatch too.
func TestReconcileTaxLines(t *testing.T) {
	withTaxes := func(vat, city string, rate *decimal.Decimal) *flow {
		f := healthy() // its invoice's lines come to 1.3
		cityRate := d("0.025")
		f.src.Invoice.LineTotals = append(f.src.Invoice.LineTotals,
			recon.LineTotal{InvoiceID: f.inv, Currency: "USD", LineID: "tax/VAT", Kind: "tax", TaxRate: rate, Amount: d(vat)},
			recon.LineTotal{InvoiceID: f.inv, Currency: "USD", LineID: "tax/CITY", Kind: "tax", TaxRate: &cityRate, Amount: d(city)})
		f.src.Query.Invoices[0].Total = d("1.3").Add(d(vat)).Add(d(city))
		return f
	}
	vat := d("0.2")
	// 0.2 x 1.3 = 0.26; 0.025 x 1.3 = 0.0325 -> 0.03.
	if rep := reconcile(t, "2026-11", withTaxes("0.26", "0.03", &vat).src); len(rep.Mismatches) != 0 {
		t.Fatalf("healthy tax lines: %+v", rep.Mismatches)
	}
	for name, f := range map[string]*flow{
		"a tax off by a cent": withTaxes("0.27", "0.03", &vat),
		"a tax rounded up":    withTaxes("0.26", "0.04", &vat),
		"a tax without rate":  withTaxes("0.26", "0.03", nil),
	} {
		rep := reconcile(t, "2026-11", f.src)
		if len(rep.Mismatches) != 1 || rep.Mismatches[0].Kind != domain.MismatchLineTotal {
			t.Errorf("%s: mismatches %+v, want one %s", name, rep.Mismatches, domain.MismatchLineTotal)
		}
	}
}

// Credit lines come off the amount due, not the total: the invoice's total
// stays its other lines; a credit line is below zero and the credits never
// take the total below zero.
func TestReconcileCreditLines(t *testing.T) {
	withCredits := func(amounts ...string) *flow {
		f := healthy() // its invoice's lines come to 1.3
		for i, a := range amounts {
			f.src.Invoice.LineTotals = append(f.src.Invoice.LineTotals, recon.LineTotal{InvoiceID: f.inv, Currency: "USD",
				LineID: "credit_applied/" + strconv.Itoa(i), Kind: "credit_applied", Amount: d(a)})
		}
		return f
	}
	if rep := reconcile(t, "2026-11", withCredits("-1", "-0.3").src); len(rep.Mismatches) != 0 {
		t.Fatalf("healthy credit lines: %+v", rep.Mismatches)
	}
	for name, f := range map[string]*flow{
		"a credit above zero":    withCredits("0.5"),
		"credits past the total": withCredits("-1", "-0.31"),
	} {
		rep := reconcile(t, "2026-11", f.src)
		if len(rep.Mismatches) != 1 || rep.Mismatches[0].Kind != domain.MismatchLineTotal {
			t.Errorf("%s: mismatches %+v, want one %s", name, rep.Mismatches, domain.MismatchLineTotal)
		}
	}
}
