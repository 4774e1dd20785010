package app_test

import (
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// periodEnded is billing's BillingPeriodEnded of a tenant's period.
func periodEnded(t *testing.T, tenant, period string, endedAt time.Time) envelope.Envelope {
	t.Helper()
	e, err := envelope.New(envelope.Meta{
		EventType: events.TypeBillingPeriodEnded, SchemaVersion: 1, TenantID: tenant,
		AggregateType: events.AggregateBillingPeriodEnd, AggregateID: period, AggregateVersion: 1,
		OccurredAt: endedAt, Producer: "billing",
	}, events.BillingPeriodEnded{Period: period, TimeZone: "UTC", EndedAt: endedAt, ClosesAt: endedAt.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Decision 0014: an open invoice reads draft once billing says its period
// ended (grace), charges rated during grace still join it, and the close
// issues it. Another tenant's invoice of the same period stays open; an
// end delivered after the close (any order) leaves the invoice issued.
func TestDraftDuringGraceThenIssued(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	other := NewPeriod(t, "globex", "2026-11")
	wantOutcomes(t, Decide(t, pool, ib, p.Charge("USD", "3", "0.25"), other.Charge("USD", "1", "0.25")), "applied", "applied")
	if got := invoices(t, pool, "acme", "2026-11")["USD"].Status; got != "open" {
		t.Fatalf("before the end: %s, want open", got)
	}
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	wantOutcomes(t, Decide(t, pool, ib, periodEnded(t, "acme", "2026-11", end)), "applied")
	// Another event id of the same period (a second scheduler's): the same
	// aggregate version, a duplicate.
	wantOutcomes(t, Decide(t, pool, ib, periodEnded(t, "acme", "2026-11", end)), "duplicate:version_already_applied")
	wantOutcomes(t, Decide(t, pool, ib, p.Charge("USD", "1", "0.25")), "applied") // rated during grace
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	if inv.Status != "draft" || inv.Number != nil || inv.Total != nil || !inv.Subtotal.Equal(D("1")) {
		t.Fatalf("in grace: %+v, want draft, unnumbered, subtotal 1", inv)
	}
	if got := invoices(t, pool, "globex", "2026-11")["USD"].Status; got != "open" {
		t.Fatalf("another tenant's invoice in acme's grace: %s, want open", got)
	}
	wantOutcomes(t, Decide(t, pool, ib, p.Close()), "applied")
	inv = invoices(t, pool, "acme", "2026-11")["USD"]
	if inv.Status != "issued" || inv.Number == nil || !inv.Total.Equal(D("1")) {
		t.Fatalf("after the close: %+v, want issued, total 1", inv)
	}
	// An end after the close (out of order) changes nothing.
	wantOutcomes(t, Decide(t, pool, ib, other.Close(), periodEnded(t, "globex", "2026-11", end)), "applied", "applied")
	if got := invoices(t, pool, "globex", "2026-11")["USD"].Status; got != "issued" {
		t.Fatalf("end after the close: %s, want issued", got)
	}
}
