package app_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
)

func invoices(t *testing.T, pool *pgxpool.Pool, tenant, period string) map[string]app.Invoice {
	t.Helper()
	invs, err := app.NewReader(pool).Invoices(context.Background(), tenant, period)
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
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func lineKinds(inv app.Invoice) map[uuid.UUID]string {
	out := make(map[uuid.UUID]string, len(inv.Lines))
	for _, l := range inv.Lines {
		out[l.OriginEventID] = l.Kind
	}
	return out
}

func TestChargesMakeOneOpenInvoicePerCurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1, c2, c3 := p.Charge("USD", "3", "0.25"), p.Charge("KRW", "10", "12.5"), p.Charge("USD", "1", "0.125")
	a1 := p.Adjustment("USD", "-0.5")
	wantOutcomes(t, Decide(t, pool, ib, c1, c2, c3, a1), "applied", "applied", "applied", "applied")

	invs := invoices(t, pool, "acme", "2026-11")
	if len(invs) != 2 {
		t.Fatalf("%d invoices, want one per currency: %+v", len(invs), invs)
	}
	usd := invs["USD"]
	if usd.Status != "open" || usd.Total != nil || usd.IssuedAt != nil || !usd.Subtotal.Equal(D("0.375")) {
		t.Fatalf("USD invoice %+v: want open, no total, subtotal 0.375", usd)
	}
	kinds := lineKinds(usd)
	if len(usd.Lines) != 3 || kinds[c1.EventID] != "charge" || kinds[c3.EventID] != "charge" || kinds[a1.EventID] != "adjustment" {
		t.Fatalf("USD lines %+v", usd.Lines)
	}
	if krw := invs["KRW"]; len(krw.Lines) != 1 || !krw.Subtotal.Equal(D("125")) {
		t.Fatalf("KRW invoice %+v", krw)
	}
	if n := len(Published(t, pool)); n != 0 {
		t.Fatalf("%d events published before the close, want 0", n)
	}
}

// The close arrives before its last charge: the inbox defers it on the
// version gap, and applies it (issuing the invoice) once the charge arrives.
func TestInvoiceDeferredUntilComplete(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1, c2, c3 := p.Charge("USD", "1", "1.10"), p.Charge("USD", "2", "1.10"), p.Charge("USD", "3", "1.10")
	closed := p.Close()

	wantOutcomes(t, Decide(t, pool, ib, c1, c2, closed), "applied", "applied", "deferred:version_gap")
	usd := invoices(t, pool, "acme", "2026-11")["USD"]
	if usd.Status != "open" || len(usd.Lines) != 2 {
		t.Fatalf("after the early close: %+v, want open with 2 lines", usd)
	}
	if n := len(Published(t, pool)); n != 0 {
		t.Fatalf("%d events published, want none before the last charge", n)
	}

	ds := Decide(t, pool, ib, c3)
	wantOutcomes(t, ds, "applied", "applied")
	if !ds[1].Woken || ds[1].EventID != closed.EventID {
		t.Fatalf("second decision %+v, want the woken close", ds[1])
	}
	usd = invoices(t, pool, "acme", "2026-11")["USD"]
	if usd.Status != "issued" || len(usd.Lines) != 3 || !usd.Total.Equal(D("6.6")) || usd.IssuedAt == nil {
		t.Fatalf("after the last charge: %+v, want issued with 3 lines, total 6.60", usd)
	}
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

// The safety net: a close that counts more events than are present with no
// version gap (billing miscounted) waits, keyed by the period's lines, and
// issues nothing.
func TestCloseCountingMissingLinesWaits(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "2")
	closed := p.CloseWith(2, 0, map[string]decimal.Decimal{"USD": D("4")})
	ds := Decide(t, pool, ib, c1, closed)
	wantOutcomes(t, ds, "applied", "deferred:missing_fact")
	if ds[1].WaitKey != app.LinesKey("acme", "2026-11") {
		t.Fatalf("wait key %q, want %q", ds[1].WaitKey, app.LinesKey("acme", "2026-11"))
	}
	if inv := invoices(t, pool, "acme", "2026-11")["USD"]; inv.Status != "open" {
		t.Fatalf("invoice %+v, want open", inv)
	}
	if n := count(t, pool, `SELECT count(*) FROM period_close`); n != 0 {
		t.Fatalf("period recorded closed while deferred")
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
			for _, c := range tt.charges {
				envs = append(envs, p.Charge(tt.currency, c[0], c[1]))
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
			case tt.rounding != "" && (len(rounding) != 1 || !rounding[0].Amount.Equal(D(tt.rounding)) || rounding[0].OriginEventID != closed.EventID):
				t.Fatalf("rounding lines %+v, want one of %s from the close %s", rounding, tt.rounding, closed.EventID)
			}

			pub := Published(t, pool)
			if len(pub) != 1 {
				t.Fatalf("%d events published, want 1", len(pub))
			}
			issued := pub[0].Payload.(events.InvoiceIssued)
			if issued.InvoiceID != inv.InvoiceID || !issued.Subtotal.Equal(D(tt.subtotal)) || !issued.Total.Equal(D(tt.total)) ||
				len(issued.Lines) != len(inv.Lines) || !issued.IssuedAt.Equal(*inv.IssuedAt) || issued.Currency != tt.currency {
				t.Fatalf("InvoiceIssued %+v does not match invoice %+v", issued, inv)
			}
		})
	}
}

// One close issues every currency's invoice of the period, each rounded on
// its own, each with its own event; a currency the close lists at zero with
// no line gets no invoice.
func TestCloseIssuesEveryCurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	envs := []envelope.Envelope{p.Charge("KRW", "1", "0.5"), p.Charge("USD", "1", "0.005"), p.Adjustment("USD", "1")}
	closed := p.Close()
	envs = append(envs, closed)
	Decide(t, pool, ib, envs...)
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

// An adjustment after the close becomes a correction note and an
// InvoiceCorrectionIssued; the issued invoice is unchanged.
func TestCorrectionAfterIssue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "10.005")
	closed := p.Close()
	Decide(t, pool, ib, c1, closed)
	before := invoices(t, pool, "acme", "2026-11")["USD"]
	if before.Status != "issued" || !before.Total.Equal(D("10")) {
		t.Fatalf("issued invoice %+v, want total 10.00", before)
	}

	adj1, adj2 := p.Adjustment("USD", "-2.5"), p.Adjustment("USD", "0.001")
	wantOutcomes(t, Decide(t, pool, ib, adj1, adj2), "applied", "applied")

	after := invoices(t, pool, "acme", "2026-11")["USD"]
	if after.Status != "issued" || !after.Total.Equal(*before.Total) || !after.Subtotal.Equal(before.Subtotal) ||
		!after.IssuedAt.Equal(*before.IssuedAt) || len(after.Lines) != len(before.Lines) {
		t.Fatalf("issued invoice changed: before %+v after %+v", before, after)
	}
	for i, b := range before.Lines {
		if a := after.Lines[i]; a.OriginEventID != b.OriginEventID || a.Kind != b.Kind || !a.Amount.Equal(b.Amount) {
			t.Fatalf("line %d changed: %+v -> %+v", i, before.Lines[i], after.Lines[i])
		}
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
// nothing: no second line, correction, close or event.
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
	snapshot := func() [4]int {
		return [4]int{
			count(t, pool, `SELECT count(*) FROM invoice_line`),
			count(t, pool, `SELECT count(*) FROM invoice_correction`),
			count(t, pool, `SELECT count(*) FROM invoice`),
			count(t, pool, `SELECT count(*) FROM outbox_event`),
		}
	}
	want := snapshot()
	// Lines: 3 charges, 1 adjustment, 2 rounding (USD 0.899 -> 0.90, KRW
	// 1.5 -> 2); 2 corrections; 2 invoices; 2 InvoiceIssued + 2 corrections.
	if want != [4]int{6, 2, 2, 4} {
		t.Fatalf("lines, corrections, invoices, events: %v, want [6 2 2 4]", want)
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
		t.Fatalf("after redelivery: lines, corrections, invoices, events %v, want %v", got, want)
	}
}

// Redelivered after the inbox forgot it (its rows deleted), an event still
// has no second effect: the unique origin constraints hold.
func TestEffectsAreUniqueByOriginEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "1")
	closed := p.Close()
	adj := p.Adjustment("USD", "-1")
	Decide(t, pool, ib, c1, closed, adj)
	if _, err := pool.Exec(context.Background(), `DELETE FROM inbox_event WHERE event_id = ANY($1)`,
		[]uuid.UUID{c1.EventID, closed.EventID, adj.EventID}); err != nil {
		t.Fatal(err)
	}
	// The charge is refused (its invoice is issued); the close and the
	// adjustment are duplicates by their effects' unique origins.
	wantOutcomes(t, Decide(t, pool, ib, c1), "quarantined:"+app.ReasonChargeAfterIssue)
	if _, err := pool.Exec(context.Background(), `INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id,
		aggregate_type, aggregate_id, aggregate_version) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		c1.EventID, c1.PayloadDigest, c1.EventType, c1.TenantID, c1.AggregateType, c1.AggregateID, c1.AggregateVersion); err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, Decide(t, pool, ib, closed), "duplicate:effect_exists:period_close_pkey")
	wantOutcomes(t, Decide(t, pool, ib, adj), "duplicate:effect_exists:invoice_correction_origin_key")
	if n := count(t, pool, `SELECT count(*) FROM invoice_line`); n != 1 {
		t.Fatalf("%d lines, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM invoice_correction`); n != 1 {
		t.Fatalf("%d corrections, want 1", n)
	}
}

func TestEventsThatCanNeverApplyAreQuarantined(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)

	// A charge after the close.
	p := NewPeriod(t, "acme", "2026-11")
	c1 := p.Charge("USD", "1", "1")
	closed := p.Close()
	late := p.Charge("USD", "1", "1")
	krwAdj := p.Adjustment("KRW", "5") // no KRW invoice to correct
	wantOutcomes(t, Decide(t, pool, ib, c1, closed, late),
		"applied", "applied", "quarantined:"+app.ReasonChargeAfterIssue)

	// The quarantined charge leaves a version gap: the adjustment behind it
	// waits (the operator redrives the charge or resolves it).
	wantOutcomes(t, Decide(t, pool, ib, krwAdj), "deferred:version_gap")

	// More lines than the close counted, or totals that differ.
	q := NewPeriod(t, "beta", "2026-11")
	qc := q.Charge("USD", "1", "1")
	wantOutcomes(t, Decide(t, pool, ib, qc, q.CloseWith(0, 0, nil)), "applied", "quarantined:"+app.ReasonCloseCountsMismatch)
	r := NewPeriod(t, "gamma", "2026-11")
	rc := r.Charge("USD", "1", "1")
	wantOutcomes(t, Decide(t, pool, ib, rc, r.CloseWith(1, 0, map[string]decimal.Decimal{"USD": D("1.5")})),
		"applied", "quarantined:"+app.ReasonCloseTotalsMismatch)
	if inv := invoices(t, pool, "gamma", "2026-11")["USD"]; inv.Status != "open" {
		t.Fatalf("invoice issued despite the totals mismatch: %+v", inv)
	}

	// A payload whose period is not its aggregate.
	s := NewPeriod(t, "delta", "2026-12")
	bad := s.Charge("USD", "1", "1")
	bad = rebuild(t, bad, func() any {
		pl := mustPayload[events.ChargeRated](t, bad)
		pl.Period = "2026-11"
		return pl
	})
	wantOutcomes(t, Decide(t, pool, ib, bad), "quarantined:"+app.ReasonPeriodMismatch)
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
	wantOutcomes(t, Decide(t, pool, ib, c1, closed, adj), "applied", "applied", "quarantined:"+app.ReasonNoInvoiceToCorrect)
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
	first := p.CloseWith(1, 0, map[string]decimal.Decimal{"USD": D("1")})
	second := p.CloseWith(1, 0, map[string]decimal.Decimal{"USD": D("1")})
	wantOutcomes(t, Decide(t, pool, ib, c1, first, second), "applied", "applied", "duplicate:effect_exists:period_close_pkey")
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
		`UPDATE invoice_line SET amount = 0`,
		`DELETE FROM invoice_line`,
		`UPDATE invoice SET total = 0`,
		`DELETE FROM invoice`,
		`UPDATE invoice_correction SET amount = 0`,
		`DELETE FROM invoice_correction`,
	} {
		if _, err := pool.Exec(context.Background(), sql); err == nil {
			t.Errorf("%s: succeeded, want refused", sql)
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
