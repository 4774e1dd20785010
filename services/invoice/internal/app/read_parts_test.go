package app_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestOpenInvoiceReadIsTheCloseOfItsParts: an open period of 83 charges,
// 80 of them one a batch (a unique_count line of 40 charges with 10
// distinct values, a sum line of 40) and a KRW line of 3 in one batch, is
// read from its lines' parts, folded as the batches came: each part table
// holds at most app.DefaultPartsFoldAt + 1 rows a line (not one a batch), and the
// open invoices' lines are those the close then issues. Reading the parts
// unfolded, or a fold that loses a part, fails it.
func TestOpenInvoiceReadIsTheCloseOfItsParts(t *testing.T) {
	t.Parallel()
	p := NewPeriod(t, "acme", "2026-11")
	pk := packagePricing("2", "5")
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	for i := range 40 {
		wantOutcomes(t, Decide(t, pool, ib, p.ChargeRated(whole("unique_count", "1", pk, at(i), "s", fmt.Sprint(i), fmt.Sprint("user-", i%10)))), "applied")
		wantOutcomes(t, Decide(t, pool, ib, p.ChargeOf("USD", "storage_gb", 1, "0.001", "1.75")), "applied")
	}
	var krw []envelope.Envelope
	for i := range 3 {
		krw = append(krw, p.ChargeOf("KRW", Meter, 1, fmt.Sprint(i+1), "13.7"))
	}
	wantOutcomes(t, Decide(t, pool, ib, krw...), "applied", "applied", "applied")

	for parts, line := range map[string]string{
		"invoice_line_part":        "currency, meter_code, price_version, dimensions_key, unpriced, aggregation, unit_price",
		"invoice_line_value_part":  "currency, meter_code, price_version, dimensions_key, unpriced",
		"invoice_meter_value_part": "meter_code",
	} {
		var most int
		if err := pool.QueryRow(t.Context(), `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM `+parts+`
			GROUP BY tenant_id, period, `+line+`) x`).Scan(&most); err != nil {
			t.Fatal(err)
		}
		if most > app.DefaultPartsFoldAt+1 {
			t.Errorf("%s holds %d rows of one line after 40 batches of it, want at most %d", parts, most, app.DefaultPartsFoldAt+1)
		}
	}
	open := invoices(t, pool, "acme", "2026-11")
	// unique_count: 10 distinct users, two per package of 5: 25.
	// storage_gb: 40 x 0.001 = 0.04; x 1.75 = 0.07.
	// KRW: 1 + 2 + 3 = 6; x 13.7 = 82.2.
	wantLines(t, open["USD"], "charge/api_calls/1 10/40 25", "charge/storage_gb/1 0.04/40 0.07")
	wantLines(t, open["KRW"], "charge/api_calls/1 6/3 82.2")
	if open["USD"].Status != "open" || !open["USD"].Subtotal.Equal(D("25.07")) || !open["KRW"].Subtotal.Equal(D("82.2")) {
		t.Fatalf("invoices %+v", open)
	}
	wantOutcomes(t, Decide(t, pool, ib, p.Close()), "applied")
	issued := invoices(t, pool, "acme", "2026-11")
	for _, cur := range []string{"USD", "KRW"} {
		if issued[cur].Status != "issued" || !slices.Equal(summaries(open[cur]), summaries(issued[cur])) {
			t.Fatalf("%s open %q, issued (%s) %q", cur, summaries(open[cur]), issued[cur].Status, summaries(issued[cur]))
		}
	}
}
