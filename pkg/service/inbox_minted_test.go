package service_test

import (
	"testing"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// A service's inbox takes the ids of usage facts, charges and adjustments
// as minted (decision 0028), and no other aggregate's. Without it the
// decisions would be the same and every claim would probe each past week
// for holders of those slots, so no other test would tell.
func TestServiceInboxKnowsTheMintedAggregates(t *testing.T) {
	ib := servicetest.NewInbox(t, service.Spec{Name: "billing"}, service.Parts{})
	for _, a := range events.MintedAggregates {
		if !ib.Minted(a) {
			t.Errorf("aggregate %q is minted, the service's inbox does not know it", a)
		}
	}
	for _, a := range []string{events.AggregateMeter, events.AggregatePrice, events.AggregateInvoice, events.AggregateBillingPeriod, events.AggregateOps} {
		if ib.Minted(a) {
			t.Errorf("aggregate %q is taken as minted, and its ids are not minted with its first event", a)
		}
	}
}
