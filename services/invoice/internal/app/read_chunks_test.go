package app_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// TestOpenInvoiceReadWalksChargesInChunks: an open period of 38 charges (a
// unique_count line of 25 charges with 10 distinct values, a sum line of
// 10, a KRW line of 3) read with a chunk of 4 reads its charges in 10
// statements of at most 4 and its distinct values in statements of 4, 4
// and 2, and answers the lines a read in one chunk answers. Without the
// chunk's limit one statement reads all 38 charges and the test fails.
func TestOpenInvoiceReadWalksChargesInChunks(t *testing.T) {
	t.Parallel()
	p := NewPeriod(t, "acme", "2026-11")
	pk := packagePricing("2", "5")
	var envs []envelope.Envelope
	for i := range 25 {
		envs = append(envs, p.ChargeRated(whole("unique_count", "1", pk, at(i), "s", fmt.Sprint(i), fmt.Sprint("user-", i%10))))
	}
	for range 10 {
		envs = append(envs, p.ChargeOf("USD", "storage_gb", 1, "0.001", "1.75"))
	}
	for i := range 3 {
		envs = append(envs, p.ChargeOf("KRW", Meter, 1, fmt.Sprint(i+1), "13.7"))
	}
	pool := pgtest.NewPool(t, Template)
	decider := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := servicetest.NewInbox(t, invoice.Spec, service.Parts{
		Topics: app.Topics, Handlers: decider.Handlers(), BatchHandlers: decider.BatchHandlers(),
	})
	Decide(t, pool, ib, envs...)

	read := func(chunk int) (map[string]app.Invoice, map[string][]int64) {
		reader := app.New(app.Deps{Pool: pool}, app.Config{CloseChunk: chunk})
		chunks := map[string][]int64{}
		reader.SetAfterReadChunk(func(kind string, n int64) { chunks[kind] = append(chunks[kind], n) })
		invs, err := reader.Invoices(t.Context(), "acme", "2026-11", nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]app.Invoice{}
		for _, inv := range invs {
			out[inv.Currency] = inv
		}
		return out, chunks
	}
	invs, chunks := read(4)
	if !slices.Equal(chunks["charges"], []int64{4, 4, 4, 4, 4, 4, 4, 4, 4, 2}) {
		t.Fatalf("charge chunks %v, want nine of 4 and one of 2", chunks["charges"])
	}
	if !slices.Equal(chunks["values"], []int64{4, 4, 2}) {
		t.Fatalf("value chunks %v, want 4, 4, 2", chunks["values"])
	}
	// unique_count: 10 distinct users, two per package of 5: 25.
	// storage_gb: 10 x 0.001 = 0.01; x 1.75 = 0.0175.
	// KRW: 1 + 2 + 3 = 6; x 13.7 = 82.2.
	wantLines(t, invs["USD"], "charge/api_calls/1 10/25 25", "charge/storage_gb/1 0.01/10 0.0175")
	wantLines(t, invs["KRW"], "charge/api_calls/1 6/3 82.2")
	if invs["USD"].Status != "open" || !invs["USD"].Subtotal.Equal(D("25.0175")) || !invs["KRW"].Subtotal.Equal(D("82.2")) {
		t.Fatalf("invoices %+v", invs)
	}
	whole, chunks := read(app.DefaultCloseChunk)
	if !slices.Equal(chunks["charges"], []int64{38}) {
		t.Fatalf("charge chunks of the whole read %v, want one of 38", chunks["charges"])
	}
	for _, cur := range []string{"USD", "KRW"} {
		if !slices.Equal(summaries(invs[cur]), summaries(whole[cur])) || !invs[cur].Subtotal.Equal(whole[cur].Subtotal) {
			t.Fatalf("%s read in chunks %q %v, in one %q %v", cur, summaries(invs[cur]), invs[cur].Subtotal,
				summaries(whole[cur]), whole[cur].Subtotal)
		}
	}
}
