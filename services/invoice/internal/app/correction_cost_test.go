package app_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// Deciding a correction note reads the invoice's running totals, not every
// earlier note: with 40 notes the statement that decides the 41st reads at
// most one row of invoice_correction (the note of the adjustment itself, a
// redelivery), and its figures are those of the 40 notes.
func TestDecidingACorrectionDoesNotRescanTheEarlierOnes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	envs := []envelope.Envelope{p.Charge("USD", "1", "100"), p.Close()}
	for range 40 {
		envs = append(envs, p.Adjustment("USD", "-1"))
	}
	for i, d := range Decide(t, pool, ib, envs...) {
		if d.Outcome != "applied" {
			t.Fatalf("event %d: %s", i, d.Outcome)
		}
	}
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	if len(inv.Corrections) != 40 {
		t.Fatalf("%d correction notes, want 40", len(inv.Corrections))
	}
	invoiceID := inv.InvoiceID
	last := envs[len(envs)-1].EventID

	for _, tc := range []struct {
		name      string
		origin    uuid.UUID
		corrected string
	}{
		{"a new adjustment", uuid.New(), "-40"},
		{"the last one again (a redelivery: decided as the first time)", last, "-39"},
	} {
		params := db.IssuedInvoiceStateParams{InvoiceID: invoiceID, OriginEventID: tc.origin}
		got, err := db.New(pool).IssuedInvoiceState(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Total.Equal(D("100")) || !got.Corrected.Equal(D(tc.corrected)) || got.NextVersion != 42 {
			t.Errorf("%s: total %s corrected %s next version %d, want 100, %s, 42", tc.name, got.Total, got.Corrected, got.NextVersion, tc.corrected)
		}
		plan := pgtest.Explain(t, pool, func(rec *pgtest.Recorder) error {
			_, err := db.New(rec).IssuedInvoiceState(ctx, params)
			return err
		})
		if n := plan.RowsRead(t, pgtest.Relation("invoice_correction")); n > 1 {
			t.Errorf("%s: the statement read %v rows of invoice_correction, want at most 1 whatever the notes: %s", tc.name, n, fmt.Sprint(string(plan)))
		}
	}
}
