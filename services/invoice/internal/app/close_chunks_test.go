package app_test

import (
	"fmt"
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
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
