package e2e

import (
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/scenario"
)

// TestBillingFlow drives all five services over HTTP as a client would
// (package scenario: prices, 1,000 usage facts over three tenants with
// replays and a conflict mixed in, an adjustment per tenant, a period
// close), checks charges, invoices and the query summary against sums
// computed from the inputs, and then that no service is left with an
// outbox backlog, dead letters, deferred or quarantined events.
func TestBillingFlow(t *testing.T) {
	tg := startTarget(t)
	res, err := scenario.Run(t.Context(), scenario.EndpointsFrom(tg.urls), scenario.Config{Progress: t.Logf})
	if res != nil {
		for _, m := range res.Mismatches {
			t.Error(m)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	recovery, err := scenario.WaitRecovered(t.Context(), tg.dbs, 30*time.Second, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range recovery {
		if !r.Zero() {
			t.Errorf("%s is left with %s", name, r)
		}
	}
}
