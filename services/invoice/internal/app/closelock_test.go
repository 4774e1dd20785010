package app_test

import (
	"sync"
	"testing"

	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// A charge of a new currency commits, with its new invoice, after the close
// locked the period's invoices and before it tallied them (another consumer
// decides it meanwhile). The close counts the charge, so it must also lock
// and issue the invoice: it locks again until every currency it tallied has
// its invoice locked; otherwise it would issue the USD invoice and leave
// the KRW one open for good, the close applied.
func TestCloseLocksAnInvoiceCreatedWhileItTallies(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	p := NewPeriod(t, "acme", "2026-11")
	usd, krw := p.Charge("USD", "1", "1"), p.Charge("KRW", "1", "10")
	closed := p.Close()

	closer := app.New(app.Deps{}, app.Config{})
	closing := servicetest.NewInbox(t, invoice.Spec, service.Parts{
		Topics: app.Topics, Handlers: closer.Handlers(), BatchHandlers: closer.BatchHandlers(),
	})
	other := NewInbox(t)
	wantOutcomes(t, Decide(t, pool, other, usd), "applied")

	var once sync.Once
	relocked := false
	closer.SetAfterLock(func() {
		if relocked {
			return
		}
		ran := false
		once.Do(func() {
			ran = true
			// The close holds the USD invoice; the KRW charge holds nothing
			// of it and commits at once, creating the KRW invoice.
			wantOutcomes(t, Decide(t, pool, other, krw), "applied")
		})
		relocked = !ran
	})
	wantOutcomes(t, Decide(t, pool, closing, closed), "applied")
	invs := invoices(t, pool, "acme", "2026-11")
	if len(invs) != 2 || invs["USD"].Status != "issued" || invs["KRW"].Status != "issued" {
		t.Fatalf("invoices %+v, want USD and KRW issued", invs)
	}
	if !invs["KRW"].Total.Equal(D("10")) || !invs["USD"].Total.Equal(D("1")) {
		t.Fatalf("totals KRW %s USD %s, want 10 and 1", invs["KRW"].Total, invs["USD"].Total)
	}
	if !relocked {
		t.Fatal("the close did not lock its invoices again after the KRW charge committed")
	}
}
