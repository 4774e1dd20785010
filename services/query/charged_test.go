package query_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/query/internal/app"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/kafkatest"
)

// The summary's charged under every pricing model, on the consumer path as
// the service runs it (a real broker, real PostgreSQL): charges of graduated,
// volume and package versions carry no amount of their own, so charged is
// the price of each line (period, meter, version) over its quantity, as the
// invoice prices it; each event delivered twice, the charges spread over
// the topic's partitions. One currency per model; the expected figures are
// worked out by hand.
func TestChargedUnderEveryPricingModel(t *testing.T) {
	brokers, base := runnerThroughKafka(t)
	f := NewFeed(t, "acme")
	ten, hundred := D("10"), D("100")
	graduated := pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
		{UpTo: &ten, UnitPrice: D("0.1"), FlatFee: D("2")}, {UnitPrice: D("0.05")}}}
	volume := pricing.Pricing{Model: pricing.Volume, Tiers: []pricing.Tier{
		{UpTo: &ten, UnitPrice: D("1")}, {UpTo: &hundred, UnitPrice: D("0.5")}, {UnitPrice: D("0.25")}}}
	size, price := D("10"), D("2.5")
	pack := pricing.Pricing{Model: pricing.Package, PackageSize: &size, PackagePrice: &price}

	var all []Event
	charge := func(meter, currency, qty, period string, version int64, p *pricing.Pricing) {
		u := f.Usage(meter, currency, qty)
		if p == nil {
			all = append(all, u, f.Charge(u, period, "0.01"))
			return
		}
		all = append(all, u, f.LineCharge(u, period, version, *p))
	}
	// unit, USD: 100 + 50.5 units at 0.01 -> 1.505.
	charge("api_calls", "USD", "100", "2026-11", 1, nil)
	charge("api_calls", "USD", "50.5", "2026-11", 1, nil)
	// graduated, EUR: November's line of 4 + 7 + 9 = 20 units:
	// 10 x 0.1 + 2 (the first tier's fee) + 10 x 0.05 = 3.5; December's
	// line of 5: 5 x 0.1 + 2 = 2.5; together 6.
	charge("calls", "EUR", "4", "2026-11", 2, &graduated)
	charge("calls", "EUR", "7", "2026-11", 2, &graduated)
	charge("calls", "EUR", "9", "2026-11", 2, &graduated)
	charge("calls", "EUR", "5", "2026-12", 2, &graduated)
	// volume, GBP: 6 + 6 = 12 units, all at the second tier's 0.5 -> 6
	// (the first charge alone would be 6 x 1: the line got cheaper per unit);
	// version 4, a line of its own: 3 units at 1 -> 3; together 9.
	charge("sms", "GBP", "6", "2026-11", 3, &volume)
	charge("sms", "GBP", "6", "2026-11", 3, &volume)
	charge("sms", "GBP", "3", "2026-11", 4, &volume)
	// package, CHF: 3 + 8 = 11 units, two packages of 10 at 2.5 -> 5.
	charge("gb", "CHF", "3", "2026-11", 5, &pack)
	charge("gb", "CHF", "8", "2026-11", 5, &pack)
	produce(t, brokers, append(all, all...)...)

	want := map[string]string{"USD": "1.505", "EUR": "6", "GBP": "9", "CHF": "5"}
	var s struct {
		Usage   struct{ Count int }
		Charged map[string]string
	}
	read := func() bool {
		return getJSON(base+"/v1/tenants/acme/summary", &s) == http.StatusOK && s.Usage.Count == len(all)/2
	}
	// The topics are consumed independently: wait for the full sums (an
	// HTTP read of what the runner projected so far, polled).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		done := read() && len(s.Charged) == len(want)
		for c, w := range want {
			done = done && D(w).Equal(D(orZero(s.Charged[c])))
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("summary %+v, want %d usage facts and charged %v", s, len(all)/2, want)
		}
	}
	// Everything was delivered twice; once every copy is decided, the sums
	// are unchanged.
	kafkatest.WaitConsumed(t, brokers, "query", time.Minute, app.Topics...)
	if !read() {
		t.Fatal("summary unreadable")
	}
	for c, w := range want {
		if !D(w).Equal(D(orZero(s.Charged[c]))) {
			t.Errorf("charged %s = %s after the duplicates, want %s", c, s.Charged[c], w)
		}
	}
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
