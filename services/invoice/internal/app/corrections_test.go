package app_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// A correction note is issued in whole minor units only (decision 0008):
// an adjustment after the close finer than its currency's minor unit is
// quarantined, never issued as -0.005.
func TestCorrectionFinerThanTheMinorUnitIsQuarantined(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	charge, closed := p.Charge("USD", "1", "10"), p.Close()
	fine, whole := p.Adjustment("USD", "-0.005"), p.Adjustment("USD", "-0.01")
	wantOutcomes(t, Decide(t, pool, ib, charge, closed, fine, whole),
		"applied", "applied", "quarantined:"+inbox.ReasonAmountPrecision, "applied")
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	if len(inv.Corrections) != 1 || !inv.Corrections[0].Amount.Equal(D("-0.01")) {
		t.Fatalf("corrections %+v, want the -0.01 one only", inv.Corrections)
	}
	if n := count(t, pool, `SELECT count(*) FROM invoice_correction WHERE amount = -0.005`); n != 0 {
		t.Fatalf("a -0.005 correction note was issued")
	}
}

// A correction note can't take its invoice below zero: the credits that
// fit are issued (down to exactly zero), the next one is quarantined
// credit_exceeds_charges; a debit makes room again. Redelivered, an issued
// credit is a duplicate, not refused for counting itself twice.
func TestCorrectionsNeverTakeTheInvoiceBelowZero(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	// Charges 10.004 + an adjustment the close counted of -0.5: total 9.50.
	charge, before := p.Charge("USD", "2", "5.002"), p.Adjustment("USD", "-0.5")
	closed := p.Close()
	c1, c2, over := p.Adjustment("USD", "-4"), p.Adjustment("USD", "-5.5"), p.Adjustment("USD", "-0.01")
	debit, c3 := p.Adjustment("USD", "1"), p.Adjustment("USD", "-1")
	wantOutcomes(t, Decide(t, pool, ib, charge, before, closed, c1, c2, over, debit, c3),
		"applied", "applied", "applied", "applied", "applied", "quarantined:"+inbox.ReasonCreditExceedsCharges, "applied", "applied")
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	sum := D("0")
	for _, c := range inv.Corrections {
		sum = sum.Add(c.Amount)
	}
	if !inv.Total.Equal(D("9.5")) || len(inv.Corrections) != 4 || !inv.Total.Add(sum).IsZero() {
		t.Fatalf("invoice total %s with corrections %+v, want 9.50 corrected to exactly 0", inv.Total, inv.Corrections)
	}
	if _, err := pool.Exec(t.Context(), `DELETE FROM inbox_event WHERE event_id = $1`, c2.EventID); err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, Decide(t, pool, ib, c2), "duplicate:effect_exists:invoice_correction_origin_key")
}

// Two credits of one issued invoice decided at once, each fitting alone but
// not together: the second waits for the first's lock on the invoice, then
// sees its note, and is quarantined rather than issued.
func TestConcurrentCorrectionsOnlyTheOneThatFits(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	ctx := t.Context()
	p := NewPeriod(t, "acme", "2026-11")
	charge, closed := p.Charge("USD", "1", "10"), p.Close()
	first, second := p.Adjustment("USD", "-6"), p.Adjustment("USD", "-6")
	wantOutcomes(t, Decide(t, pool, ib, charge, closed), "applied", "applied")

	msg := func(e envelope.Envelope) []inbox.Message {
		return []inbox.Message{{Raw: Raw(t, e)[0], Topic: events.TopicBilling}}
	}
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback(ctx) }()
	ds1, err := ib.Decide(ctx, tx1, msg(first))
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, ds1, "applied")

	type result struct {
		ds  []inbox.Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			r.ds, r.err = ib.Decide(ctx, tx, msg(second))
			return r.err
		})
		done <- r
	}()
	// Wait until the second decision waits for a lock the first holds.
	deadline := time.Now().Add(10 * time.Second)
	for count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second correction never waited for the first")
		}
		time.Sleep(10 * time.Millisecond) // polled: only pg_stat_activity shows a backend waiting
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantOutcomes(t, r.ds, "quarantined:"+inbox.ReasonCreditExceedsCharges)
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	if len(inv.Corrections) != 1 || inv.Corrections[0].OriginEventID != first.EventID {
		t.Fatalf("corrections %+v, want the first credit only", inv.Corrections)
	}
}
