package app_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// TestCloseTalliesChargesInChunks: a period of 100 charges (three USD lines,
// one KRW line) closed with a chunk of 4 is tallied in 26 statements of at
// most 4 charges (the last finds none), and issues exactly what a close
// tallying the whole period at once issues: the same lines, totals and
// numbers.
func TestCloseTalliesChargesInChunks(t *testing.T) {
	t.Parallel()
	p := NewPeriod(t, "acme", "2026-11")
	var envs []envelope.Envelope
	for i := range 30 {
		envs = append(envs,
			p.ChargeOf("USD", Meter, 1, fmt.Sprintf("%d.5", i), "0.0033"),
			p.ChargeOf("USD", Meter, 2, fmt.Sprintf("%d", i+1), "0.0025"),
			p.ChargeOf("USD", "storage_gb", 1, "0.001", "1.75"))
	}
	for i := range 10 {
		envs = append(envs, p.ChargeOf("KRW", Meter, 1, fmt.Sprint(i+1), "13.7"))
	}
	adj := p.Adjustment("USD", "-0.0125")
	envs = append(envs, adj)
	closed := p.Close()

	issue := func(chunk int) (map[string]app.Invoice, []int64) {
		pool := pgtest.NewPool(t, Template)
		closer := app.New(app.Deps{}, app.Config{CloseChunk: chunk})
		var chunks []int64
		closer.SetAfterChunk(func(n int64) { chunks = append(chunks, n) })
		ib := servicetest.NewInbox(t, invoice.Spec, service.Parts{
			Topics: app.Topics, Handlers: closer.Handlers(), BatchHandlers: closer.BatchHandlers(),
		})
		Decide(t, pool, ib, envs...)
		chunks = nil // only the close's
		wantOutcomes(t, Decide(t, pool, ib, closed), "applied")
		return invoices(t, pool, "acme", "2026-11"), chunks
	}
	invs, chunks := issue(4)
	if len(chunks) != 26 || chunks[len(chunks)-1] != 0 {
		t.Fatalf("chunks of the close %v, want 25 of 4 and an empty one", chunks)
	}
	for _, n := range chunks {
		if n > 4 {
			t.Fatalf("a chunk read %d charges, more than 4: %v", n, chunks)
		}
	}
	// api_calls v1: sum of i.5 for i < 30 = 450; x 0.0033 = 1.485.
	// api_calls v2: 1 + ... + 30 = 465; x 0.0025 = 1.1625.
	// storage_gb v1: 30 x 0.001 = 0.03; x 1.75 = 0.0525.
	// KRW: 1 + ... + 10 = 55; x 13.7 = 753.5, rounded to 754 (0 decimals).
	wantLines(t, invs["USD"], "charge/api_calls/1 450/30 1.485", "charge/api_calls/2 465/30 1.1625", "charge/storage_gb/1 0.03/30 0.0525",
		"adjustment/"+adj.EventID.String()+" -0.0125", "rounding 0.0025")
	if !invs["USD"].Total.Equal(D("2.69")) || invs["USD"].Status != "issued" || invs["KRW"].Status != "issued" {
		t.Fatalf("invoices %+v", invs)
	}
	whole, chunks := issue(app.DefaultCloseChunk)
	if len(chunks) != 1 || chunks[0] != 100 {
		t.Fatalf("chunks of the whole close %v, want one of 100", chunks)
	}
	for cur, inv := range whole {
		got := invs[cur]
		if !got.Total.Equal(*inv.Total) || !got.Subtotal.Equal(inv.Subtotal) || *got.Number != *inv.Number || len(got.Lines) != len(inv.Lines) {
			t.Fatalf("%s: in chunks %+v, at once %+v", cur, got, inv)
		}
		for i, l := range inv.Lines {
			if lineSummary(got.Lines[i]) != lineSummary(l) {
				t.Fatalf("%s line %d: in chunks %s, at once %s", cur, i, lineSummary(got.Lines[i]), lineSummary(l))
			}
		}
	}
}

// TestCloseChunksCommitOnTheirOwn: a close of 100 charges tallied in chunks
// of 4 with a pool commits each chunk on its own (another connection sees
// the position advance while the close is still being decided), survives a
// cancel after its 7th chunk (the 7 chunks stay, no invoice is issued),
// walks a bounded number of chunks per decision and is set aside to resume
// by the sweep, and ends
// with the invoices a close read at once issues, each issued once: no chunk
// is read twice and none is skipped.
func TestCloseChunksCommitOnTheirOwn(t *testing.T) {
	t.Parallel()
	p := NewPeriod(t, "acme", "2026-11")
	var envs []envelope.Envelope
	for i := range 30 {
		envs = append(envs,
			p.ChargeOf("USD", Meter, 1, fmt.Sprintf("%d.5", i), "0.0033"),
			p.ChargeOf("USD", Meter, 2, fmt.Sprintf("%d", i+1), "0.0025"),
			p.ChargeOf("USD", "storage_gb", 1, "0.001", "1.75"))
	}
	for i := range 10 {
		envs = append(envs, p.ChargeOf("KRW", Meter, 1, fmt.Sprint(i+1), "13.7"))
	}
	adj := p.Adjustment("USD", "-0.0125")
	envs = append(envs, adj)
	closed := p.Close()

	pool := pgtest.NewPool(t, Template)
	closer := app.New(app.Deps{Pool: pool}, app.Config{CloseChunk: 4, CloseChunksPerAttempt: 4})
	ib := servicetest.NewInbox(t, invoice.Spec, service.Parts{
		Topics: app.Topics, Handlers: closer.Handlers(), BatchHandlers: closer.BatchHandlers(),
	})
	Decide(t, pool, ib, envs...)

	committed := func() int64 { // read by another connection than the close's
		var n int64
		err := pool.QueryRow(t.Context(), `SELECT COALESCE((SELECT chunks FROM close_tally WHERE tenant_id = 'acme' AND period = '2026-11'), 0)`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var chunks []int64
	var seen []int64 // the chunks committed, as another connection saw them after each chunk
	ctx, cancel := context.WithCancel(t.Context())
	closer.SetAfterChunk(func(n int64) {
		chunks = append(chunks, n)
		seen = append(seen, committed())
		if len(chunks) == 7 {
			cancel() // the close is interrupted between its 7th and 8th chunks
		}
	})
	if _, err := servicetest.TryDecide(ctx, pool, ib, servicetest.Messages(events.TopicBilling, Raw(t, closed)...)...); err == nil {
		t.Fatal("the cancelled close was decided")
	}
	for i, n := range seen {
		if n != int64(i+1) {
			t.Fatalf("after chunk %d another connection saw %d chunks committed (%v): the chunks share a transaction", i+1, n, seen)
		}
	}
	if got := committed(); got != 7 {
		t.Fatalf("%d chunks committed after the cancel, want 7", got)
	}
	if invs := invoices(t, pool, "acme", "2026-11"); invs["USD"].Status != "open" {
		t.Fatalf("the interrupted close issued %+v", invs["USD"])
	}

	// The next decision resumes at chunk 8 and walks at most 4 chunks per
	// call of the handler (the inbox calls it at most twice in a decision:
	// in its batch, then alone), then sets the close aside; the sweep
	// resumes it, a few chunks per decision, until it is issued.
	ds := Decide(t, pool, ib, closed)
	wantOutcomes(t, ds, "deferred:missing_fact")
	if ds[0].WaitKey != app.CloseTallyKey("acme", "2026-11") {
		t.Fatalf("wait key %q", ds[0].WaitKey)
	}
	if len(chunks) <= 7 || len(chunks) > 7+2*4 {
		t.Fatalf("%d chunks after the second decision, want 8 to 15: %v", len(chunks), chunks)
	}
	for sweeps := 0; ; sweeps++ {
		if sweeps == 5 {
			t.Fatalf("the close is not issued after 5 sweeps: chunks %v", chunks)
		}
		// Due now: the sweep's back-off is not what this test measures.
		if _, err := pool.Exec(t.Context(), `UPDATE inbox_deferred SET next_attempt = now()`); err != nil {
			t.Fatal(err)
		}
		if Sweep(t, pool, ib) == 1 {
			break
		}
	}
	var sum int64
	for _, n := range chunks {
		sum += n
	}
	if len(chunks) != 26 || sum != 100 || chunks[25] != 0 {
		t.Fatalf("chunks %v (sum %d), want 25 of 4 and an empty one, each read once", chunks, sum)
	}
	invs := invoices(t, pool, "acme", "2026-11")
	wantLines(t, invs["USD"], "charge/api_calls/1 450/30 1.485", "charge/api_calls/2 465/30 1.1625", "charge/storage_gb/1 0.03/30 0.0525",
		"adjustment/"+adj.EventID.String()+" -0.0125", "rounding 0.0025")
	if !invs["USD"].Total.Equal(D("2.69")) || invs["USD"].Status != "issued" || invs["KRW"].Status != "issued" {
		t.Fatalf("invoices %+v", invs)
	}
	// A redelivery of the close is a duplicate: each invoice issued once.
	wantOutcomes(t, Decide(t, pool, ib, closed), "duplicate")
	issued := 0
	for _, d := range Published(t, pool) {
		if d.Envelope.EventType == events.TypeInvoiceIssued {
			issued++
		}
	}
	if issued != 2 {
		t.Fatalf("%d InvoiceIssued published, want 2", issued)
	}
}

// TestChunkedCloseWalksAgainForALateCharge: a close whose chunked tally
// (with a pool: each chunk committed) finds one charge missing waits for
// it (CloseKey) and forgets its tally; once the charge is here the sweep
// walks the charges again and issues the invoice with it.
func TestChunkedCloseWalksAgainForALateCharge(t *testing.T) {
	t.Parallel()
	p := NewPeriod(t, "acme", "2026-11")
	var envs []envelope.Envelope
	for i := range 12 {
		envs = append(envs, p.ChargeOf("USD", Meter, 1, fmt.Sprint(i+1), "0.5"))
	}
	closed := p.Close()
	pool := pgtest.NewPool(t, Template)
	closer := app.New(app.Deps{Pool: pool}, app.Config{CloseChunk: 4})
	ib := servicetest.NewInbox(t, invoice.Spec, service.Parts{
		Topics: app.Topics, Handlers: closer.Handlers(), BatchHandlers: closer.BatchHandlers(),
	})
	Decide(t, pool, ib, envs[1:]...) // the first charge comes after the close
	ds := Decide(t, pool, ib, closed)
	wantOutcomes(t, ds, "deferred:missing_fact")
	if ds[0].WaitKey != app.CloseKey("acme", "2026-11") {
		t.Fatalf("wait key %q", ds[0].WaitKey)
	}
	Decide(t, pool, ib, envs[0])
	// Due now: the sweep's back-off is not what this test measures.
	if _, err := pool.Exec(t.Context(), `UPDATE inbox_deferred SET next_attempt = now()`); err != nil {
		t.Fatal(err)
	}
	if n := Sweep(t, pool, ib); n != 1 {
		t.Fatalf("sweep applied %d, want the close", n)
	}
	// 1 + ... + 12 = 78; x 0.5 = 39.
	invs := invoices(t, pool, "acme", "2026-11")
	if invs["USD"].Status != "issued" || !invs["USD"].Total.Equal(D("39")) {
		t.Fatalf("invoice %+v", invs["USD"])
	}
}

// TestCloseCountsDistinctValuesInChunks: a unique_count line of 25 charges
// with 10 distinct values, closed with a chunk of 4 (with a pool: each
// chunk its own transaction), counts its values in statements of at most
// 4 (4, 4, 2) and prices the 10: five packages of 2 at 5.
func TestCloseCountsDistinctValuesInChunks(t *testing.T) {
	t.Parallel()
	p := NewPeriod(t, "acme", "2026-11")
	pk := packagePricing("2", "5")
	var envs []envelope.Envelope
	for i := range 25 {
		envs = append(envs, p.ChargeRated(whole("unique_count", "1", pk, at(i), "s", fmt.Sprint(i), fmt.Sprint("user-", i%10))))
	}
	closed := p.Close()
	pool := pgtest.NewPool(t, Template)
	closer := app.New(app.Deps{Pool: pool}, app.Config{CloseChunk: 4})
	var values []int64
	closer.SetAfterValueChunk(func(n int64) { values = append(values, n) })
	ib := servicetest.NewInbox(t, invoice.Spec, service.Parts{
		Topics: app.Topics, Handlers: closer.Handlers(), BatchHandlers: closer.BatchHandlers(),
	})
	Decide(t, pool, ib, envs...)
	wantOutcomes(t, Decide(t, pool, ib, closed), "applied")
	if !slices.Equal(values, []int64{4, 4, 2}) {
		t.Fatalf("value chunks %v, want 4, 4, 2", values)
	}
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	if got := summaries(inv); !slices.Equal(got, []string{"charge/api_calls/1 10/25 25"}) || !inv.Total.Equal(D("25")) {
		t.Fatalf("lines %q, total %v; want 10 distinct of 25 charges, 25", got, inv.Total)
	}
}
