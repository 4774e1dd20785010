package app_test

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

var at0 = time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)

// at is at0 plus minutes.
func at(minutes int) time.Time { return at0.Add(time.Duration(minutes) * time.Minute) }

func unitPricing(price string) *pricing.Pricing {
	p := pricing.UnitPricing(D(price))
	return &p
}

func packagePricing(size, price string) *pricing.Pricing {
	s, pr := D(size), D(price)
	return &pricing.Pricing{Model: pricing.Package, PackageSize: &s, PackagePrice: &pr}
}

// perCharge is a ChargeRated of a sum or count meter under unit pricing:
// its amount its own.
func perCharge(agg, quantity, unitPrice string, dims map[string]string) events.ChargeRated {
	c := events.ChargeRated{Aggregation: agg, Quantity: D(quantity), UnitPrice: D(unitPrice), PriceVersion: 1,
		Dimensions: dims, OccurredAt: at0}
	c.Amount = c.Counted().Mul(c.UnitPrice)
	return c
}

// whole is a ChargeRated of a line priced whole by p: no amount of its own.
func whole(agg, quantity string, p *pricing.Pricing, occurred time.Time, source, id, value string) events.ChargeRated {
	c := events.ChargeRated{Aggregation: agg, Quantity: D(quantity), PriceVersion: 1, Pricing: p, OccurredAt: occurred,
		SourceSystem: source, SourceEventID: id, Value: value}
	if p.Model != pricing.Unit {
		c.Model = p.Model
	}
	return c
}

// deliveries decides the same charges twice, each into a database of its
// own: as built, in one batch; and in reverse order one by one, the first
// delivered twice more (a redelivery in its own batch, and again inside a
// batch with another charge), so that both see the duplicate. Each database
// then gets the close. It returns the open invoice before the close and the
// issued one after it, of each database.
func deliveries(t *testing.T, tenant string, build func(p *Period) []envelope.Envelope) (open, issued [2]app.Invoice) {
	t.Helper()
	p := NewPeriod(t, tenant, "2026-11")
	charges := build(p)
	closed := p.Close()
	for run := range 2 {
		pool := pgtest.NewPool(t, Template)
		ib := NewInbox(t)
		switch run {
		case 0:
			for _, d := range Decide(t, pool, ib, charges...) {
				if d.Outcome != inbox.OutcomeApplied {
					t.Fatalf("in order: decision %+v", d)
				}
			}
		default:
			rev := slices.Clone(charges)
			slices.Reverse(rev)
			for _, c := range rev {
				wantOutcomes(t, Decide(t, pool, ib, c), "applied")
			}
			wantOutcomes(t, Decide(t, pool, ib, charges[0]), "duplicate")
			if len(charges) > 1 {
				ds := Decide(t, pool, ib, charges[1], charges[0])
				if ds[1].Outcome != inbox.OutcomeDuplicate {
					t.Fatalf("redelivery in a batch: %v", outcomes(ds))
				}
			}
		}
		open[run] = invoices(t, pool, tenant, "2026-11")["USD"]
		wantOutcomes(t, Decide(t, pool, ib, closed), "applied")
		issued[run] = invoices(t, pool, tenant, "2026-11")["USD"]
		if issued[run].Status != "issued" {
			t.Fatalf("run %d: invoice %+v after the close, want issued", run, issued[run])
		}
	}
	return open, issued
}

// summaries are the invoice's lines but rounding (lineSummary).
func summaries(inv app.Invoice) []string {
	var out []string
	for _, l := range inv.Lines {
		if l.Kind != "rounding" {
			out = append(out, lineSummary(l))
		}
	}
	return out
}

// A line's quantity is its meter's aggregation over its charges and its
// amount the pricing over that quantity, whatever the delivery order and
// with a redelivery: the open invoice shows what the issued one holds, and
// both orders give the same invoice.
func TestLinesAggregateByTheirMeter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		charges func(p *Period) []events.ChargeRated
		lines   []string
		total   string
	}{
		{"sum by model", func(p *Period) []events.ChargeRated {
			gpt4 := map[string]string{"model": "gpt-4"}
			return []events.ChargeRated{perCharge("sum", "100", "0.03", gpt4), perCharge("sum", "250", "0.03", gpt4),
				perCharge("", "0.5", "0.03", gpt4)}
		}, []string{"charge/api_calls/1/model=gpt-4 350.5/3 10.515"}, "10.52"},
		{"count", func(p *Period) []events.ChargeRated {
			return []events.ChargeRated{perCharge("count", "1", "0.25", nil), perCharge("count", "7", "0.25", nil),
				perCharge("count", "1", "0.25", nil)}
		}, []string{"charge/api_calls/1 3/3 0.75"}, "0.75"},
		{"max under unit pricing", func(p *Period) []events.ChargeRated {
			u := unitPricing("2.5")
			return []events.ChargeRated{whole("max", "5", u, at(1), "s", "1", ""), whole("max", "12", u, at(2), "s", "2", ""),
				whole("max", "7", u, at(3), "s", "3", ""), whole("max", "12", u, at(4), "s", "4", "")}
		}, []string{"charge/api_calls/1 12/4 30"}, "30"},
		{"latest under graduated pricing", func(p *Period) []events.ChargeRated {
			tiers := &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
				{UpTo: ptr(D("10")), UnitPrice: D("0")}, {UnitPrice: D("1.5")}}}
			return []events.ChargeRated{whole("latest", "40", tiers, at(1), "s", "1", ""),
				whole("latest", "14", tiers, at(9), "s", "2", ""), whole("latest", "99", tiers, at(5), "s", "3", "")}
		}, []string{"charge/api_calls/1 14/3 6"}, "6"},
		{"latest with an occurredAt tie", func(p *Period) []events.ChargeRated {
			u := unitPricing("1")
			// At 9 minutes three facts: the larger (sourceSystem,
			// sourceEventId) wins, compared byte-wise: ("b", "1") over
			// ("a", "9") and ("B", "99"), and "9" over "10" within "a".
			return []events.ChargeRated{whole("latest", "3", u, at(9), "a", "9", ""),
				whole("latest", "4", u, at(9), "b", "1", ""), whole("latest", "5", u, at(9), "a", "10", ""),
				whole("latest", "6", u, at(8), "z", "z", ""), whole("latest", "7", u, at(9), "B", "99", "")}
		}, []string{"charge/api_calls/1 4/5 4"}, "4"},
		{"unique_count with repeated values", func(p *Period) []events.ChargeRated {
			pk := packagePricing("2", "5")
			var cs []events.ChargeRated
			for i, v := range []string{"u1", "u2", "u1", "u3", "u2", "u1", "U1"} {
				cs = append(cs, whole("unique_count", "1", pk, at(i), "s", string(rune('a'+i)), v))
			}
			return cs
		}, []string{"charge/api_calls/1 4/7 10"}, "10"}, // u1, u2, u3, U1: two packages of 2
		{"unpriced", func(p *Period) []events.ChargeRated {
			return []events.ChargeRated{{MeterCode: "storage", Quantity: D("3"), Unpriced: true, OccurredAt: at0},
				{MeterCode: "storage", Quantity: D("4.5"), Unpriced: true, OccurredAt: at0},
				{MeterCode: "seats", Aggregation: "max", Quantity: D("8"), Unpriced: true, OccurredAt: at(1)},
				{MeterCode: "seats", Aggregation: "max", Quantity: D("6"), Unpriced: true, OccurredAt: at(2)},
				perCharge("sum", "2", "0.5", nil)}
		}, []string{"charge/api_calls/1 2/1 1", "unpriced/seats 8/2 0", "unpriced/storage 7.5/2 0"}, "1"},
		{"a plan's charges beside the tenant's own version of the same number", func(p *Period) []events.ChargeRated {
			// decision 0021: each priced by its own pricing, none by another's
			own := &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{{UpTo: ptr(D("10")), UnitPrice: D("0")}, {UnitPrice: D("2")}}}
			eu, base := packagePricing("5", "3"), packagePricing("100", "7")
			plan := func(c events.ChargeRated, dims map[string]string) events.ChargeRated {
				c.PlanCode, c.Dimensions = "pro", dims
				return c
			}
			euDims := map[string]string{"region": "eu"}
			return []events.ChargeRated{whole("sum", "12", own, at(1), "s", "1", ""), whole("sum", "3", own, at(2), "s", "2", ""),
				plan(whole("sum", "6", eu, at(3), "s", "3", ""), euDims), plan(whole("sum", "1", eu, at(4), "s", "4", ""), euDims),
				plan(whole("sum", "150", base, at(5), "s", "5", ""), nil)}
		}, []string{"charge/api_calls/1 15/2 10", "charge/api_calls/1/%40plan=pro 150/1 14", "charge/api_calls/1/%40plan=pro&region=eu 7/2 6"}, "30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			open, issued := deliveries(t, "acme", func(p *Period) []envelope.Envelope {
				var envs []envelope.Envelope
				for _, c := range tt.charges(p) {
					envs = append(envs, p.ChargeRated(c))
				}
				return envs
			})
			for run := range 2 {
				for name, inv := range map[string]app.Invoice{"open": open[run], "issued": issued[run]} {
					if got := summaries(inv); !slices.Equal(got, tt.lines) {
						t.Fatalf("run %d, %s: lines %q, want %q", run, name, got, tt.lines)
					}
				}
				if want := D(tt.total); !issued[run].Total.Equal(want) {
					t.Fatalf("run %d: total %v, want %s", run, issued[run].Total, want)
				}
			}
			if !slices.Equal(summaries(issued[0]), summaries(issued[1])) || !issued[0].Subtotal.Equal(issued[1].Subtotal) {
				t.Fatalf("the two orders disagree: %q and %q", summaries(issued[0]), summaries(issued[1]))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// Charges of one meter under prices with different dimensions are lines
// apart, each with its dimensions; the default price's line has none, and
// a dimension value that needs escaping keeps the line id unambiguous.
func TestDimensionLinesApart(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	gpt4 := map[string]string{"model": "gpt-4", "region": "eu"}
	odd := map[string]string{"model": "a&b=c/d"}
	def := perCharge("sum", "10", "0.002", nil)
	def.PriceVersion = 2
	withOdd := perCharge("sum", "1", "0.5", odd)
	withOdd.PriceVersion = 3
	envs := []envelope.Envelope{p.ChargeRated(perCharge("sum", "100", "0.03", gpt4)), p.ChargeRated(def),
		p.ChargeRated(perCharge("sum", "50", "0.03", gpt4)), p.ChargeRated(withOdd), p.ChargeRated(def)}
	Decide(t, pool, ib, envs...)
	want := []string{"charge/api_calls/1/model=gpt-4&region=eu 150/2 4.5", "charge/api_calls/2 20/2 0.04",
		"charge/api_calls/3/model=a%26b%3Dc%2Fd 1/1 0.5"}
	if got := summaries(invoices(t, pool, "acme", "2026-11")["USD"]); !slices.Equal(got, want) {
		t.Fatalf("open lines %q, want %q", got, want)
	}
	wantOutcomes(t, Decide(t, pool, ib, p.Close()), "applied")
	usd := invoices(t, pool, "acme", "2026-11")["USD"]
	if got := summaries(usd); !slices.Equal(got, want) {
		t.Fatalf("issued lines %q, want %q", got, want)
	}
	dims := []map[string]string{usd.Lines[0].Dimensions, usd.Lines[1].Dimensions, usd.Lines[2].Dimensions}
	if !catalog.Same(dims[0], gpt4) || dims[1] != nil || !catalog.Same(dims[2], odd) {
		t.Fatalf("line dimensions %v", dims)
	}
	issued := Published(t, pool)[0].Payload.(events.InvoiceIssued)
	if issued.ChargeLines != 3 || issued.Charges != 5 || !issued.Total.Equal(D("5.04")) {
		t.Fatalf("InvoiceIssued %+v, want 3 lines of 5 charges, total 5.04", issued)
	}
}

// The reconciliation rows name each charge's line, unpriced ones included,
// and the line totals show every line as the invoice does.
func TestReconciliationOfCatalogLines(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	envs := []envelope.Envelope{
		p.ChargeRated(perCharge("sum", "3", "1", map[string]string{"model": "x"})),
		p.ChargeRated(events.ChargeRated{MeterCode: "seats", Aggregation: "max", Quantity: D("8"), Unpriced: true, OccurredAt: at0}),
		p.ChargeRated(events.ChargeRated{MeterCode: "seats", Aggregation: "max", Quantity: D("2"), Unpriced: true, OccurredAt: at0}),
	}
	wantOutcomes(t, Decide(t, pool, ib, append(envs, p.Close())...), "applied", "applied", "applied", "applied")
	r := reconRows(t, pool)
	lines := map[string]int{}
	for _, l := range r.InvoiceLines {
		if l.Kind != "charge" {
			t.Fatalf("row %+v, want charges only", l)
		}
		lines[l.LineID]++
	}
	if lines["charge/api_calls/1/model=x"] != 1 || lines["unpriced/seats"] != 2 {
		t.Fatalf("charges by line %v", lines)
	}
	var totals []string
	for _, lt := range r.LineTotals {
		totals = append(totals, lt.Kind+" "+lt.LineID+" "+lt.Quantity.String()+" "+lt.Amount.String())
	}
	if want := []string{"charge charge/api_calls/1/model=x 3 3", "unpriced unpriced/seats 8 0"}; !slices.Equal(totals, want) {
		t.Fatalf("line totals %q, want %q", totals, want)
	}
}

// Several consumers decide the charges of one max and one unique_count
// line at once, each batch in its own order, with values and maxima
// shared between batches: none fails, and the lines are exact.
func TestConcurrentRunningLines(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	const consumers, each = 6, 30
	u := unitPricing("1")
	batches := make([][]envelope.Envelope, consumers)
	for i := range batches {
		for j := range each {
			peak := whole("max", decimal.NewFromInt(int64((i*each+j)%97)).String(), u, at(j), "s", "", "")
			peak.MeterCode = "seats"
			user := whole("unique_count", "1", u, at(j), "s", "", "user-"+decimal.NewFromInt(int64((i*each+j)%40)).String())
			user.MeterCode = "users"
			batches[i] = append(batches[i], p.ChargeRated(peak), p.ChargeRated(user))
		}
		rand.Shuffle(len(batches[i]), func(a, b int) { batches[i][a], batches[i][b] = batches[i][b], batches[i][a] })
	}
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() {
			for _, d := range Decide(t, pool, ib, b...) {
				if d.Outcome != inbox.OutcomeApplied {
					t.Errorf("decision %+v, want applied", d)
				}
			}
		})
	}
	wg.Wait()
	wantOutcomes(t, Decide(t, pool, ib, p.Close()), "applied")
	usd := invoices(t, pool, "acme", "2026-11")["USD"]
	want := []string{"charge/seats/1 96/180 96", "charge/users/1 40/180 40"}
	if got := summaries(usd); !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
}

// The fixed-fee and true-up lines billing's close carries are written on
// the issued invoice of their currency, after the usage lines and before
// the adjustments, and count in its subtotal; a currency with fees only
// gets an invoice of its own; a redelivered close changes nothing.
func TestFeeLinesOfTheClose(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	charge := p.ChargeRated(perCharge("sum", "10", "0.5", nil))
	adj := p.Adjustment("USD", "-1.25")
	fee := func(kind, plan string, v int64, code string, days int, amount string) events.FeeLine {
		return events.FeeLine{Kind: kind, PlanCode: plan, PlanVersion: v, FeeCode: code, Name: code, Days: days, PeriodDays: 30, Amount: D(amount)}
	}
	closed := p.CloseWithFees(map[string][]events.FeeLine{
		"USD": {fee("fixed_fee", "pro", 1, "base", 15, "24.50"), fee("minimum_true_up", "pro", 1, "", 15, "20.005")},
		"KRW": {fee("fixed_fee", "won", 2, "seat", 30, "9900")},
	})
	wantOutcomes(t, Decide(t, pool, ib, charge, adj), "applied", "applied")
	wantOutcomes(t, Decide(t, pool, ib, closed), "applied")
	wantOutcomes(t, Decide(t, pool, ib, closed), "duplicate")
	invs := invoices(t, pool, "acme", "2026-11")
	usd, krw := invs["USD"], invs["KRW"]
	wantLines(t, usd, "charge/api_calls/1 10/1 5", "fixed_fee/pro/1/base 24.5", "minimum_true_up/pro/1 20.005",
		"adjustment/"+adj.EventID.String()+" -1.25", "rounding 0.005") // 48.255 to even
	if usd.Status != "issued" || !usd.Subtotal.Equal(D("48.255")) || !usd.Total.Equal(D("48.26")) {
		t.Fatalf("USD invoice %s %s/%s, want issued 48.255/48.26", usd.Status, usd.Subtotal, usd.Total)
	}
	if l := usd.Lines[1]; l.PlanCode != "pro" || l.PlanVersion != 1 || l.FeeCode != "base" || l.Days != 15 || l.PeriodDays != 30 {
		t.Fatalf("fee line %+v", l)
	}
	wantLines(t, krw, "fixed_fee/won/2/seat 9900")
	if krw.Status != "issued" || !krw.Total.Equal(D("9900")) {
		t.Fatalf("KRW invoice %s %s, want issued 9900", krw.Status, krw.Total)
	}
}

// The close's tax rates add one tax line per rate to each invoice of the
// period, after the rounding line, rate x the rounded subtotal rounded
// half-even; the total adds them; the issued event carries the tax total.
func TestTaxLinesOfTheClose(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	charge := p.Charge("USD", "10", "0.5005") // 5.005, rounds to 5.00
	won := p.Charge("KRW", "3", "35")
	closed := p.CloseWithTaxes(events.TaxRate{Code: "VAT", Name: "VAT 10%", Rate: D("0.1")},
		events.TaxRate{Code: "CITY", Name: "City tax", Rate: D("0.025")})
	wantOutcomes(t, Decide(t, pool, ib, charge, won, closed), "applied", "applied", "applied")
	invs := invoices(t, pool, "acme", "2026-11")
	usd, krw := invs["USD"], invs["KRW"]
	// USD: 5.005 -> 5.00 (to even); VAT 0.5; city 0.125 -> 0.12 (to even).
	wantLines(t, usd, "charge/api_calls/1 10/1 5.005", "rounding -0.005", "tax/VAT 0.5", "tax/CITY 0.12")
	if !usd.Subtotal.Equal(D("5.005")) || !usd.TaxTotal.Equal(D("0.62")) || !usd.Total.Equal(D("5.62")) {
		t.Fatalf("USD invoice %s + taxes %s = %s, want 5.005 + 0.62 = 5.62", usd.Subtotal, usd.TaxTotal, usd.Total)
	}
	if l := usd.Lines[2]; l.TaxCode != "VAT" || l.Name != "VAT 10%" || l.TaxRate == nil || !l.TaxRate.Equal(D("0.1")) {
		t.Fatalf("tax line %+v", l)
	}
	// KRW: 105; VAT 10.5 -> 10 (to even); city 2.625 -> 3.
	wantLines(t, krw, "charge/api_calls/1 3/1 105", "tax/VAT 10", "tax/CITY 3")
	if !krw.Total.Equal(D("118")) {
		t.Fatalf("KRW total %s, want 118", krw.Total)
	}
	for _, d := range Published(t, pool) {
		iss, ok := d.Payload.(events.InvoiceIssued)
		if !ok {
			continue
		}
		want := map[string]string{"USD": "0.62", "KRW": "13"}[iss.Currency]
		if !iss.TaxTotal.Equal(D(want)) || !iss.Total.Equal(*invs[iss.Currency].Total) {
			t.Errorf("InvoiceIssued %s: tax total %s total %s, want %s and %s", iss.Currency, iss.TaxTotal, iss.Total, want, invs[iss.Currency].Total)
		}
	}
}
