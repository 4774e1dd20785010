package app_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/digest"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func invoices(t *testing.T, pool *pgxpool.Pool, tenant, period string) map[string]app.Invoice {
	t.Helper()
	invs, err := app.New(app.Deps{Pool: pool}, app.Config{}).Invoices(t.Context(), tenant, period, nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]app.Invoice, len(invs))
	for _, inv := range invs {
		out[inv.Currency] = inv
	}
	return out
}

func outcomes(ds []inbox.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Outcome
		if d.Reason != "" {
			out[i] += ":" + d.Reason
		}
	}
	return out
}

func wantOutcomes(t *testing.T, ds []inbox.Decision, want ...string) {
	t.Helper()
	got := outcomes(ds)
	if len(got) != len(want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("decisions %v, want %v", got, want)
		}
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// lineSummary writes a line as "<lineId> <quantity>/<chargeCount> <amount>"
// (quantity and count for charge and unpriced lines only), for comparisons.
func lineSummary(l app.Line) string {
	if l.Kind == "charge" || l.Kind == "unpriced" {
		return fmt.Sprintf("%s %s/%d %s", l.LineID, l.Quantity, l.ChargeCount, l.Amount)
	}
	return l.LineID + " " + l.Amount.String()
}

func wantLines(t *testing.T, inv app.Invoice, want ...string) {
	t.Helper()
	got := make([]string, len(inv.Lines))
	for i, l := range inv.Lines {
		got[i] = lineSummary(l)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s invoice lines\n%s\nwant\n%s", inv.Currency, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Charges of two meters and price versions make one open invoice per
// currency whose charge lines are computed from them, one per meter and
// version.
func TestChargesMakeOneOpenInvoicePerCurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1, c2, c3 := p.Charge("USD", "3", "0.25"), p.Charge("KRW", "10", "12.5"), p.Charge("USD", "1", "0.25")
	c4, c5 := p.ChargeOf("USD", "storage_gb", 2, "0.5", "0.125"), p.ChargeOf("USD", Meter, 2, "4", "0.2")
	a1 := p.Adjustment("USD", "-0.5")
	wantOutcomes(t, Decide(t, pool, ib, c1, c2, c3, c4, c5, a1), "applied", "applied", "applied", "applied", "applied", "applied")

	invs := invoices(t, pool, "acme", "2026-11")
	if len(invs) != 2 {
		t.Fatalf("%d invoices, want one per currency: %+v", len(invs), invs)
	}
	usd := invs["USD"]
	if usd.Status != "open" || usd.Number != nil || usd.Total != nil || usd.IssuedAt != nil || !usd.Subtotal.Equal(D("1.3625")) {
		t.Fatalf("USD invoice %+v: want open, no number, no total, subtotal 1.3625", usd)
	}
	wantLines(t, usd, "charge/api_calls/1 4/2 1", "charge/api_calls/2 4/1 0.8", "charge/storage_gb/2 0.5/1 0.0625",
		"adjustment/"+a1.EventID.String()+" -0.5")
	if o := usd.Lines[3].OriginEventID; o == nil || *o != a1.EventID || usd.Lines[0].OriginEventID != nil {
		t.Fatalf("origin events of the lines: %+v", usd.Lines)
	}
	wantLines(t, invs["KRW"], "charge/api_calls/1 10/1 125")
	if n := count(t, pool, `SELECT count(*) FROM invoice_charge`); n != 5 {
		t.Fatalf("%d charges recorded, want 5", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM invoice_line WHERE kind = 'charge'`); n != 0 {
		t.Fatalf("%d charge lines stored before the close, want none", n)
	}
	if n := len(Published(t, pool)); n != 0 {
		t.Fatalf("%d events published before the close, want 0", n)
	}
}

// Several consumers decide one invoice's charges at once, the first of them
// creating the invoice: none waits on another's row, none fails.
func TestConcurrentChargesOfOneInvoice(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	const consumers, each = 8, 25
	batches := make([][]envelope.Envelope, consumers)
	for i := range batches {
		for range each {
			batches[i] = append(batches[i], p.Charge("USD", "1", "0.01"))
		}
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
	if usd.Status != "issued" || !usd.Total.Equal(D("2")) {
		t.Fatalf("invoice %+v, want issued, total 2", usd)
	}
	wantLines(t, usd, "charge/api_calls/1 200/200 2")
}

// The close arrives before some of the charges it counts (they come on
// other partitions): it waits, keyed by CloseKey, which no charge provides;
// the inbox's sweep decides it again and issues the invoice once the last
// counted charge is here.
func TestCloseWaitsForChargesUntilTheSweep(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1, c2, c3 := p.Charge("USD", "1", "1.10"), p.Charge("USD", "2", "1.10"), p.Charge("USD", "3", "1.10")
	closed := p.Close()

	ds := Decide(t, pool, ib, c1, closed)
	wantOutcomes(t, ds, "applied", "deferred:missing_fact")
	if ds[1].WaitKey != app.CloseKey("acme", "2026-11") {
		t.Fatalf("wait key %q, want %q", ds[1].WaitKey, app.CloseKey("acme", "2026-11"))
	}
	if n := count(t, pool, `SELECT count(*) FROM period_close`); n != 0 {
		t.Fatalf("period recorded closed while deferred")
	}
	// A charge that does not complete the set wakes nothing, and the sweep
	// finds the close still incomplete.
	wantOutcomes(t, Decide(t, pool, ib, c2), "applied")
	if n := Sweep(t, pool, ib); n != 0 {
		t.Fatalf("the sweep applied %d events with a charge still missing", n)
	}
	if usd := invoices(t, pool, "acme", "2026-11")["USD"]; usd.Status != "open" || len(Published(t, pool)) != 0 {
		t.Fatalf("after the early close: %+v, want open and nothing published", usd)
	}

	// The last charge: applied on its own, then the sweep issues the period
	// (once the close's back-off has passed).
	wantOutcomes(t, Decide(t, pool, ib, c3), "applied")
	deadline := time.Now().Add(30 * time.Second)
	for Sweep(t, pool, ib) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweep did not apply the close")
		}
		// Polled: the close waits out the inbox's back-off, a time in its
		// table, before the sweep may apply it.
		time.Sleep(200 * time.Millisecond)
	}
	usd := invoices(t, pool, "acme", "2026-11")["USD"]
	if usd.Status != "issued" || !usd.Total.Equal(D("6.6")) || usd.IssuedAt == nil || *usd.Number != 1 {
		t.Fatalf("after the last charge: %+v, want issued number 1, total 6.60", usd)
	}
	wantLines(t, usd, "charge/api_calls/1 6/3 6.6")
	pub := Published(t, pool)
	if len(pub) != 1 || pub[0].Envelope.EventType != events.TypeInvoiceIssued {
		t.Fatalf("published %d events, want one InvoiceIssued", len(pub))
	}
	e := pub[0].Envelope
	if e.AggregateType != "invoice" || e.AggregateID != usd.InvoiceID.String() || e.AggregateVersion != 1 ||
		e.TenantID != "acme" || e.Producer != "invoice" || e.CausationID != closed.EventID.String() {
		t.Fatalf("InvoiceIssued envelope %+v", e)
	}
	if n := count(t, pool, `SELECT count(*) FROM inbox_deferred`); n != 0 {
		t.Fatalf("%d events still deferred", n)
	}
}

func TestRoundingAtIssue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		currency string
		charges  [][2]string // quantity, unit price
		subtotal string
		total    string
		rounding string // "" when no rounding line
	}{
		{"KRW tie rounds down to even", "KRW", [][2]string{{"1", "1234"}, {"1", "0.5"}}, "1234.5", "1234", "-0.5"},
		{"KRW tie rounds up to even", "KRW", [][2]string{{"3", "411.5"}, {"1", "1"}}, "1235.5", "1236", "0.5"},
		{"KRW above half", "KRW", [][2]string{{"7", "0.37"}}, "2.59", "3", "0.41"},
		{"KRW exact", "KRW", [][2]string{{"1000", "12"}}, "12000", "12000", ""},
		{"USD tie rounds down to even", "USD", [][2]string{{"3", "0.125"}, {"1", "9.75"}}, "10.125", "10.12", "-0.005"},
		{"USD tie rounds up to even", "USD", [][2]string{{"1", "10.135"}}, "10.135", "10.14", "0.005"},
		{"USD below half", "USD", [][2]string{{"3", "0.0033"}}, "0.0099", "0.01", "0.0001"},
		{"USD exact", "USD", [][2]string{{"4", "2.5"}}, "10", "10", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t, Template)
			ib := NewInbox(t)
			p := NewPeriod(t, "acme", "2026-10")
			var envs []envelope.Envelope
			for i, c := range tt.charges {
				// Each charge of its own price version: a line each.
				envs = append(envs, p.ChargeOf(tt.currency, Meter, int64(i+1), c[0], c[1]))
			}
			closed := p.Close()
			envs = append(envs, closed)
			Decide(t, pool, ib, envs...)

			inv := invoices(t, pool, "acme", "2026-10")[tt.currency]
			if inv.Status != "issued" || !inv.Subtotal.Equal(D(tt.subtotal)) || !inv.Total.Equal(D(tt.total)) {
				t.Fatalf("invoice %s subtotal %s total %v, want issued %s and %s", inv.Status, inv.Subtotal, inv.Total, tt.subtotal, tt.total)
			}
			var rounding []app.Line
			sum := decimal.Zero
			for _, l := range inv.Lines {
				sum = sum.Add(l.Amount)
				if l.Kind == "rounding" {
					rounding = append(rounding, l)
				}
			}
			if !sum.Equal(*inv.Total) {
				t.Fatalf("lines sum to %s, total is %s", sum, inv.Total)
			}
			switch {
			case tt.rounding == "" && len(rounding) != 0:
				t.Fatalf("rounding lines %+v, want none", rounding)
			case tt.rounding != "" && (len(rounding) != 1 || !rounding[0].Amount.Equal(D(tt.rounding)) ||
				*rounding[0].OriginEventID != closed.EventID || rounding[0].LineID != "rounding"):
				t.Fatalf("rounding lines %+v, want one of %s from the close %s", rounding, tt.rounding, closed.EventID)
			}

			pub := Published(t, pool)
			if len(pub) != 1 {
				t.Fatalf("%d events published, want 1", len(pub))
			}
			issued := pub[0].Payload.(events.InvoiceIssued)
			wantRounding := decimal.Zero
			if tt.rounding != "" {
				wantRounding = D(tt.rounding)
			}
			if issued.InvoiceID != inv.InvoiceID || issued.Number != 1 || !issued.Subtotal.Equal(D(tt.subtotal)) ||
				!issued.Total.Equal(D(tt.total)) || !issued.Rounding.Equal(wantRounding) ||
				issued.ChargeLines != int64(len(tt.charges)) || issued.Charges != int64(len(tt.charges)) || issued.Adjustments != 0 ||
				!issued.IssuedAt.Equal(*inv.IssuedAt) || issued.Currency != tt.currency || issued.Period != "2026-10" {
				t.Fatalf("InvoiceIssued %+v does not match invoice %+v", issued, inv)
			}
		})
	}
}

// Each charge line's amount is its price version's pricing over the line's
// quantity, and equals the sum of its charges' amounts; every charge is in
// exactly one line. The reconciliation rows say the same: one row per
// charge with its line id, and the lines as shown.
func TestChargeLinesSumTheirCharges(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	var envs []envelope.Envelope
	for i := range 30 {
		envs = append(envs,
			p.ChargeOf("USD", Meter, 1, fmt.Sprintf("%d.5", i), "0.0033"),
			p.ChargeOf("USD", Meter, 2, fmt.Sprintf("%d", i+1), "0.0025"),
			p.ChargeOf("USD", "storage_gb", 1, "0.001", "1.75"))
	}
	adj := p.Adjustment("USD", "-0.0125")
	envs = append(envs, adj)
	open := p.Tallies()
	closed := p.Close()
	Decide(t, pool, ib, envs...)
	beforeIssue := reconRows(t, pool)
	Decide(t, pool, ib, closed)

	usd := invoices(t, pool, "acme", "2026-11")["USD"]
	// api_calls v1: sum of i.5 for i < 30 = 450; x 0.0033 = 1.485.
	// api_calls v2: 1 + ... + 30 = 465; x 0.0025 = 1.1625.
	// storage_gb v1: 30 x 0.001 = 0.03; x 1.75 = 0.0525.
	wantLines(t, usd, "charge/api_calls/1 450/30 1.485", "charge/api_calls/2 465/30 1.1625", "charge/storage_gb/1 0.03/30 0.0525",
		"adjustment/"+adj.EventID.String()+" -0.0125", "rounding 0.0025")
	if !usd.Total.Equal(D("2.69")) || !usd.Subtotal.Equal(D("2.6875")) || !open["USD"].ChargeAmount.Equal(D("2.7")) {
		t.Fatalf("invoice %+v, want subtotal 2.6875 and total 2.69", usd)
	}
	for _, l := range usd.Lines[:3] {
		price := map[string]string{"charge/api_calls/1": "0.0033", "charge/api_calls/2": "0.0025", "charge/storage_gb/1": "1.75"}[l.LineID]
		amount, err := domain.LineAmount(domain.Pricing{Model: domain.ModelUnit, UnitPrice: D(price)}, *l.Quantity)
		if err != nil || !amount.Equal(l.Amount) {
			t.Fatalf("line %s amount %s, its pricing gives %s (%v)", l.LineID, l.Amount, amount, err)
		}
	}

	for name, rows := range map[string]func() reconView{
		"open":   func() reconView { return beforeIssue },
		"issued": func() reconView { return reconRows(t, pool) },
	} {
		r := rows()
		sums := map[string][3]decimal.Decimal{} // line id: quantity, count, amount of what it counts
		for _, l := range r.InvoiceLines {
			s := sums[l.LineID]
			sums[l.LineID] = [3]decimal.Decimal{s[0].Add(l.Quantity), s[1].Add(decimal.NewFromInt(1)), s[2].Add(l.Amount)}
		}
		if n := len(r.InvoiceLines); n != 91 && !(name == "issued" && n == 92) {
			t.Fatalf("%s: %d reconciliation rows, want one per charge and adjustment (and rounding)", name, n)
		}
		for _, lt := range r.LineTotals {
			s := sums[lt.LineID]
			if lt.Kind == "charge" && (!s[0].Equal(lt.Quantity) || s[1].IntPart() != lt.ChargeCount || !s[2].Equal(lt.Amount)) {
				t.Fatalf("%s: line %+v, its charges sum to %v", name, lt, s)
			}
			if lt.Kind != "charge" && !s[2].Equal(lt.Amount) {
				t.Fatalf("%s: line %+v, its origin sums to %s", name, lt, s[2])
			}
		}
		if len(r.LineTotals) != len(sums) {
			t.Fatalf("%s: %d line totals for %d line ids", name, len(r.LineTotals), len(sums))
		}
	}
}

// reconView is what invoice's reconciliation sets hold of acme's 2026-11.
type reconView struct {
	InvoiceLines []recon.InvoiceLine // counted charges, adjustment and rounding lines
	LineTotals   []recon.LineTotal
}

func reconRows(t *testing.T, pool *pgxpool.Pool) reconView {
	t.Helper()
	sets := app.New(app.Deps{Pool: pool}, app.Config{}).Reconciliation()
	var v reconView
	for _, set := range []string{recon.SetInvoiceCharges, recon.SetInvoiceLines} {
		for _, r := range readSet(t, sets[set]) {
			v.InvoiceLines = append(v.InvoiceLines, r.(recon.InvoiceLine))
		}
	}
	for _, r := range readSet(t, sets[recon.SetLineTotals]) {
		v.LineTotals = append(v.LineTotals, r.(recon.LineTotal))
	}
	return v
}

// readSet reads a reconciliation set in small pages, checking each row is
// after the one before.
func readSet(t *testing.T, read recon.SetFunc) []recon.Row {
	t.Helper()
	var out []recon.Row
	q := recon.Query{TenantID: "acme", Period: "2026-11", Limit: 7}
	for {
		page, err := read(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if len(out) > 0 && r.Pos().Compare(out[len(out)-1].Pos()) <= 0 {
				t.Fatalf("row %+v is not after %+v", r, out[len(out)-1])
			}
			out = append(out, r)
		}
		if len(page) < q.Limit {
			return out
		}
		q.After = page[len(page)-1].Pos()
	}
}

// One close issues every currency's invoice of the period, each rounded on
// its own, each with its own event; a currency the close lists empty gets no
// invoice.
func TestCloseIssuesEveryCurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	envs := []envelope.Envelope{p.Charge("KRW", "1", "0.5"), p.Charge("USD", "1", "0.005"), p.Adjustment("USD", "1")}
	tallies := p.Tallies()
	tallies["EUR"] = events.CloseTally{ChargeDigest: "0", AdjustmentDigest: "0"}
	closed := p.CloseWith(tallies)
	envs = append(envs, closed)
	wantOutcomes(t, Decide(t, pool, ib, envs...), "applied", "applied", "applied", "applied")
	invs := invoices(t, pool, "acme", "2026-11")
	if len(invs) != 2 || invs["KRW"].Status != "issued" || invs["USD"].Status != "issued" {
		t.Fatalf("invoices %+v, want KRW and USD issued", invs)
	}
	if !invs["KRW"].Total.Equal(D("0")) || !invs["USD"].Total.Equal(D("1")) {
		t.Fatalf("totals KRW %s USD %s, want 0 and 1", invs["KRW"].Total, invs["USD"].Total)
	}
	if n := count(t, pool, `SELECT count(*) FROM invoice_line WHERE kind = 'rounding' AND origin_event_id = $1`, closed.EventID); n != 2 {
		t.Fatalf("%d rounding lines from the close, want 2", n)
	}
	if n := len(Published(t, pool)); n != 2 {
		t.Fatalf("%d InvoiceIssued, want 2", n)
	}
}

// Invoice numbers are a gap-free sequence per tenant, taken at issue, across
// periods and currencies; a close that is quarantined takes none.
func TestInvoiceNumbersAreGapFreePerTenant(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	sep, oct, nov := NewPeriod(t, "acme", "2026-09"), NewPeriod(t, "acme", "2026-10"), NewPeriod(t, "acme", "2026-11")
	other := NewPeriod(t, "beta", "2026-10")
	envs := []envelope.Envelope{
		sep.Charge("USD", "1", "1"), sep.Charge("KRW", "1", "10"), sep.Charge("EUR", "1", "1"),
		oct.Charge("USD", "1", "1"), nov.Charge("USD", "1", "1"), other.Charge("USD", "1", "1"),
	}
	wrong := oct.Tallies()
	wrong["USD"] = events.CloseTally{Charges: 1, ChargeAmount: D("2"), ChargeDigest: wrong["USD"].ChargeDigest, AdjustmentDigest: "0"}
	// acme: September's three invoices, then October's close quarantined,
	// then November's; beta its own sequence.
	envs = append(envs, sep.Close(), other.Close(), oct.CloseWith(wrong), nov.Close())
	wantOutcomes(t, Decide(t, pool, ib, envs...), "applied", "applied", "applied", "applied", "applied", "applied",
		"applied", "applied", "quarantined:"+inbox.ReasonCloseTotalsMismatch, "applied")

	numbers := map[string]int64{}
	for _, pc := range [][2]string{{"acme", "2026-09"}, {"acme", "2026-11"}, {"beta", "2026-10"}} {
		for cur, inv := range invoices(t, pool, pc[0], pc[1]) {
			numbers[pc[0]+" "+pc[1]+" "+cur] = *inv.Number
		}
	}
	want := map[string]int64{"acme 2026-09 EUR": 1, "acme 2026-09 KRW": 2, "acme 2026-09 USD": 3, "acme 2026-11 USD": 4, "beta 2026-10 USD": 1}
	if !maps.Equal(numbers, want) {
		t.Fatalf("invoice numbers %v, want %v", numbers, want)
	}
	if inv := invoices(t, pool, "acme", "2026-10")["USD"]; inv.Status != "open" || inv.Number != nil {
		t.Fatalf("October's invoice %+v, want open without a number", inv)
	}
	got := map[int64]bool{}
	for _, d := range Published(t, pool) {
		if d.Envelope.TenantID == "acme" {
			got[d.Payload.(events.InvoiceIssued).Number] = true
		}
	}
	if len(got) != 4 || !got[1] || !got[4] {
		t.Fatalf("InvoiceIssued numbers of acme %v, want 1 to 4", got)
	}
}

// An adjustment posted after the close becomes a correction note and an
// InvoiceCorrectionIssued; the issued invoice is unchanged. One that comes
// before invoice has applied the close waits for the issue (IssuedKey), and
// the close wakes it.
func TestCorrectionAfterIssue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "10.005")
	closed := p.Close()
	adj1, adj2 := p.Adjustment("USD", "-2.5"), p.Adjustment("USD", "0.01")

	ds := Decide(t, pool, ib, c1, adj1)
	wantOutcomes(t, ds, "applied", "deferred:missing_fact")
	if ds[1].WaitKey != app.IssuedKey("acme", "2026-11") {
		t.Fatalf("wait key %q, want %q", ds[1].WaitKey, app.IssuedKey("acme", "2026-11"))
	}
	ds = Decide(t, pool, ib, closed)
	wantOutcomes(t, ds, "applied", "applied")
	if !ds[1].Woken || ds[1].EventID != adj1.EventID {
		t.Fatalf("second decision %+v, want the woken adjustment", ds[1])
	}
	before := invoices(t, pool, "acme", "2026-11")["USD"]
	if before.Status != "issued" || !before.Total.Equal(D("10")) || len(before.Corrections) != 1 {
		t.Fatalf("issued invoice %+v, want total 10.00 and one correction", before)
	}

	wantOutcomes(t, Decide(t, pool, ib, adj2), "applied")
	after := invoices(t, pool, "acme", "2026-11")["USD"]
	if after.Status != "issued" || !after.Total.Equal(*before.Total) || !after.Subtotal.Equal(before.Subtotal) ||
		!after.IssuedAt.Equal(*before.IssuedAt) || *after.Number != *before.Number || !slices.EqualFunc(after.Lines, before.Lines,
		func(a, b app.Line) bool { return lineSummary(a) == lineSummary(b) }) {
		t.Fatalf("issued invoice changed: before %+v after %+v", before, after)
	}
	if len(after.Corrections) != 2 || after.Corrections[0].OriginEventID != adj1.EventID ||
		!after.Corrections[0].Amount.Equal(D("-2.5")) || after.Corrections[1].OriginEventID != adj2.EventID {
		t.Fatalf("corrections %+v, want the two adjustments in order", after.Corrections)
	}

	pub := Published(t, pool)
	if len(pub) != 3 {
		t.Fatalf("%d events published, want InvoiceIssued and two corrections", len(pub))
	}
	for i, adj := range []envelope.Envelope{adj1, adj2} {
		d := pub[i+1]
		c := d.Payload.(events.InvoiceCorrectionIssued)
		e := d.Envelope
		if e.EventType != events.TypeInvoiceCorrectionIssued || e.AggregateType != "invoice" ||
			e.AggregateID != before.InvoiceID.String() || e.AggregateVersion != int64(i+2) || e.CausationID != adj.EventID.String() {
			t.Fatalf("correction envelope %d: %+v", i, e)
		}
		want := after.Corrections[i]
		if c.CorrectionID != want.CorrectionID || c.InvoiceID != before.InvoiceID || c.OriginEventID != adj.EventID ||
			!c.Amount.Equal(want.Amount) || !c.IssuedAt.Equal(want.IssuedAt) || c.Period != "2026-11" || c.Currency != "USD" {
			t.Fatalf("correction payload %+v, want %+v", c, want)
		}
	}
}

// Everything delivered again, in one batch and then shuffled, changes
// nothing: no second charge, line, correction, close or event.
func TestRedeliveryOfEverythingChangesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	envs := []envelope.Envelope{
		p.Charge("USD", "1", "0.333"), p.Charge("USD", "2", "0.333"), p.Charge("KRW", "3", "0.5"),
		p.Adjustment("USD", "-0.1"),
	}
	envs = append(envs, p.Close())
	envs = append(envs, p.Adjustment("USD", "0.2"), p.Adjustment("KRW", "-1"))
	first := Decide(t, pool, ib, envs...)
	for _, d := range first {
		if d.Outcome != inbox.OutcomeApplied {
			t.Fatalf("first delivery: %v", outcomes(first))
		}
	}
	snapshot := func() [5]int {
		return [5]int{
			count(t, pool, `SELECT count(*) FROM invoice_charge`),
			count(t, pool, `SELECT count(*) FROM invoice_line`),
			count(t, pool, `SELECT count(*) FROM invoice_correction`),
			count(t, pool, `SELECT count(*) FROM invoice`),
			count(t, pool, `SELECT count(*) FROM outbox_event`),
		}
	}
	want := snapshot()
	// 3 charges; lines: 2 charge lines, 1 adjustment, 2 rounding (USD 0.899
	// -> 0.90, KRW 1.5 -> 2); 2 corrections; 2 invoices; 2 InvoiceIssued +
	// 2 corrections.
	if want != [5]int{3, 5, 2, 2, 4} {
		t.Fatalf("charges, lines, corrections, invoices, events: %v, want [3 5 2 2 4]", want)
	}

	raws := Raw(t, envs...)
	again := DecideRaw(t, pool, ib, append(raws, raws...)...)
	for _, d := range again {
		if d.Outcome != inbox.OutcomeDuplicate {
			t.Fatalf("redelivery: %v, want all duplicate", outcomes(again))
		}
	}
	rand.Shuffle(len(raws), func(i, j int) { raws[i], raws[j] = raws[j], raws[i] })
	for _, r := range raws {
		DecideRaw(t, pool, ib, r)
	}
	if got := snapshot(); got != want {
		t.Fatalf("after redelivery: charges, lines, corrections, invoices, events %v, want %v", got, want)
	}
}

// Redelivered after the inbox forgot it (its rows deleted), an event still
// has no second effect: the unique origin constraints make it a duplicate,
// even a charge of a period closed since.
func TestEffectsAreUniqueByOriginEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "1")
	a1 := p.Adjustment("USD", "1")
	closed := p.Close()
	adj := p.Adjustment("USD", "-1")
	Decide(t, pool, ib, c1, a1, closed, adj)
	if _, err := pool.Exec(t.Context(), `DELETE FROM inbox_event WHERE event_id = ANY($1)`,
		[]uuid.UUID{c1.EventID, a1.EventID, closed.EventID, adj.EventID}); err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, Decide(t, pool, ib, c1), "duplicate:effect_exists:invoice_charge_origin_key")
	wantOutcomes(t, Decide(t, pool, ib, a1), "duplicate:effect_exists:invoice_line_origin_key")
	wantOutcomes(t, Decide(t, pool, ib, closed), "duplicate:effect_exists:period_close_pkey")
	wantOutcomes(t, Decide(t, pool, ib, adj), "duplicate:effect_exists:invoice_correction_origin_key")
	if n := count(t, pool, `SELECT count(*) FROM invoice_charge`); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM invoice_correction`); n != 1 {
		t.Fatalf("%d corrections, want 1", n)
	}
}

// Charges decided in one statement keep the per-charge outcomes: in one
// batch, charges redelivered after the inbox forgot them (of an open and of
// a closed period) are duplicates, a charge of a closed period is
// quarantined, and the others are recorded once each.
func TestChargesOfOneBatchAreDecidedEach(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	open := NewPeriod(t, "acme", "2026-11")
	closedP := NewPeriod(t, "acme", "2026-10")
	old := open.Charge("USD", "1", "1")
	oldClosed := closedP.Charge("USD", "2", "1")
	wantOutcomes(t, Decide(t, pool, ib, old, oldClosed, closedP.Close()), "applied", "applied", "applied")
	if _, err := pool.Exec(t.Context(), `DELETE FROM inbox_event WHERE event_id = ANY($1)`,
		[]uuid.UUID{old.EventID, oldClosed.EventID}); err != nil {
		t.Fatal(err)
	}
	batch := []envelope.Envelope{open.Charge("USD", "1", "1"), old, open.Charge("EUR", "1", "1"),
		closedP.Charge("USD", "1", "1"), open.Charge("USD", "1", "1"), oldClosed, open.Charge("EUR", "1", "1")}
	wantOutcomes(t, Decide(t, pool, ib, batch...),
		"applied", "duplicate:effect_exists:invoice_charge_origin_key", "applied",
		"quarantined:"+inbox.ReasonChargeAfterIssue, "applied", "duplicate:effect_exists:invoice_charge_origin_key", "applied")
	if n := count(t, pool, `SELECT count(*) FROM invoice_charge WHERE period = '2026-11'`); n != 5 {
		t.Fatalf("%d charges of the open period, want 5", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM invoice_charge WHERE period = '2026-10'`); n != 1 {
		t.Fatalf("%d charges of the closed period, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM invoice WHERE period = '2026-11'`); n != 2 {
		t.Fatalf("%d invoices of the open period, want 2 (USD, EUR)", n)
	}
}

func TestEventsThatCanNeverApplyAreQuarantined(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)

	// A charge after the close, and an adjustment that says the close
	// counted it but comes after the issue.
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "1")
	closed := p.Close()
	late := p.Charge("USD", "1", "1")
	counted := p.Adjustment("USD", "1")
	counted = rebuild(t, counted, func() any {
		pl := mustPayload[events.AdjustmentPosted](t, counted)
		pl.AfterClose = false
		return pl
	})
	wantOutcomes(t, Decide(t, pool, ib, c1, closed, late, counted),
		"applied", "applied", "quarantined:"+inbox.ReasonChargeAfterIssue, "quarantined:"+inbox.ReasonAdjustmentAfterIssue)

	// More charges than the close counted.
	q := NewPeriod(t, "beta", "2026-11")
	qc := q.Charge("USD", "1", "1")
	wantOutcomes(t, Decide(t, pool, ib, qc, q.CloseWith(nil)), "applied", "quarantined:"+inbox.ReasonCloseCountsMismatch)

	// The charges counted, but another amount.
	r := NewPeriod(t, "gamma", "2026-11")
	rc := r.Charge("USD", "1", "1")
	tallies := r.Tallies()
	usd := tallies["USD"]
	usd.ChargeAmount = D("1.5")
	tallies["USD"] = usd
	wantOutcomes(t, Decide(t, pool, ib, rc, r.CloseWith(tallies)), "applied", "quarantined:"+inbox.ReasonCloseTotalsMismatch)
	if inv := invoices(t, pool, "gamma", "2026-11")["USD"]; inv.Status != "open" {
		t.Fatalf("invoice issued despite the totals mismatch: %+v", inv)
	}

	// One price version at two unit prices.
	s := NewPeriod(t, "delta", "2026-11")
	wantOutcomes(t, Decide(t, pool, ib, s.Charge("USD", "1", "1"), s.Charge("USD", "1", "2"), s.Close()),
		"applied", "applied", "quarantined:"+inbox.ReasonPriceVersionConflict)

	// A payload that is not its aggregate.
	u := NewPeriod(t, "epsilon", "2026-12")
	bad := u.Charge("USD", "1", "1")
	bad = rebuild(t, bad, func() any {
		pl := mustPayload[events.ChargeRated](t, bad)
		pl.ChargeID = uuid.New()
		return pl
	})
	wantOutcomes(t, Decide(t, pool, ib, bad), "quarantined:"+inbox.ReasonAggregateMismatch)
}

// As many charges as the close counted, summing to its amount, but not the
// ones it counted: the digest tells, and the close is quarantined.
func TestDigestMismatchWithEqualCountQuarantines(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1, c2 := p.Charge("USD", "1", "1"), p.Charge("USD", "2", "1")
	counted := p.Tallies()
	// The close counted c1 and another charge of c2's amount, which never
	// comes; c2 is a charge it did not count.
	var ids digest.Set
	ids.Add(c1.EventID)
	ids.Add(uuid.New())
	usd := counted["USD"]
	usd.ChargeDigest = ids.String()
	counted["USD"] = usd
	closed := p.CloseWith(counted)
	wantOutcomes(t, Decide(t, pool, ib, c1, c2, closed), "applied", "applied", "quarantined:"+inbox.ReasonCloseDigestMismatch)
	if inv := invoices(t, pool, "acme", "2026-11")["USD"]; inv.Status != "open" || inv.Number != nil {
		t.Fatalf("invoice %+v, want open: the close did not count its charges", inv)
	}
	if n := count(t, pool, `SELECT count(*) FROM period_close`) + len(Published(t, pool)); n != 0 {
		t.Fatalf("close recorded or events published despite the digest mismatch")
	}
}

// An adjustment after the close in a currency the period has no invoice in
// has nothing to correct.
func TestAdjustmentWithoutInvoiceAfterClose(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "1")
	closed := p.Close()
	adj := p.Adjustment("KRW", "5")
	wantOutcomes(t, Decide(t, pool, ib, c1, closed, adj), "applied", "applied", "quarantined:"+inbox.ReasonNoInvoiceToCorrect)
	if n := count(t, pool, `SELECT count(*) FROM invoice WHERE currency = 'KRW'`); n != 0 {
		t.Fatalf("a KRW invoice was created for a closed period")
	}
}

// A second close of a closed period (billing restarted its close) is a
// duplicate: nothing is issued twice.
func TestSecondCloseIsADuplicate(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "1")
	first, second := p.Close(), p.CloseWith(p.Tallies())
	ds := Decide(t, pool, ib, c1, first, second)
	if ds[2].Outcome != inbox.OutcomeDuplicate {
		t.Fatalf("decisions %v, want the second close a duplicate", outcomes(ds))
	}
	if n := len(Published(t, pool)); n != 1 {
		t.Fatalf("%d events, want one InvoiceIssued", n)
	}
}

func TestIssuedDataIsImmutable(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	Decide(t, pool, ib, p.Charge("USD", "1", "1.005"), p.Close(), p.Adjustment("USD", "1"))
	for _, sql := range []string{
		`UPDATE invoice_charge SET amount = 0`,
		`DELETE FROM invoice_charge`,
		`UPDATE invoice_line SET amount = 0`,
		`DELETE FROM invoice_line`,
		`UPDATE invoice SET total = 0`,
		`DELETE FROM invoice`,
		`UPDATE invoice_correction SET amount = 0`,
		`DELETE FROM invoice_correction`,
	} {
		if _, err := pool.Exec(t.Context(), sql); err == nil {
			t.Errorf("%s: succeeded, want refused", sql)
		}
	}
}

// The tally's digest expression in SQL is pkg/digest's SQLTerm: the close
// and invoice compute the same digest of the same ids.
func TestTallyDigestIsDigestSQLTerm(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ids := []uuid.UUID{uuid.Nil, uuid.New(), uuid.New(), uuid.New()}
	var want digest.Set
	for _, id := range ids {
		want.Add(id)
	}
	var got string
	query := `SELECT COALESCE(sum(` + strings.ReplaceAll(digest.SQLTerm, "col", "id") + `), 0)::text FROM unnest($1::uuid[]) AS t(id)`
	if err := pool.QueryRow(t.Context(), query, ids).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want.String() {
		t.Fatalf("SQLTerm digest %s, digest.Set %s", got, want.String())
	}
	src, err := os.ReadFile("../db/queries.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"origin_event_id", "l.origin_event_id"} {
		if !strings.Contains(string(src), strings.ReplaceAll(digest.SQLTerm, "col", col)) {
			t.Errorf("queries.sql does not digest %s with digest.SQLTerm", col)
		}
	}
}

func mustPayload[T any](t *testing.T, e envelope.Envelope) T {
	t.Helper()
	reg := envelope.NewRegistry()
	events.Register(reg)
	raw, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d, err := reg.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d.Payload.(T)
}

// rebuild makes a new envelope with e's metadata and the payload payload
// returns.
func rebuild(t *testing.T, e envelope.Envelope, payload func() any) envelope.Envelope {
	t.Helper()
	m := envelope.Meta{
		EventType: e.EventType, SchemaVersion: e.SchemaVersion, TenantID: e.TenantID,
		AggregateType: e.AggregateType, AggregateID: e.AggregateID, AggregateVersion: e.AggregateVersion,
		OccurredAt: e.OccurredAt, Producer: e.Producer, CorrelationID: e.CorrelationID,
	}
	out, err := envelope.New(m, payload())
	if err != nil {
		t.Fatal(err)
	}
	return out
}
