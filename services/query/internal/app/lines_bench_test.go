package app_test

import (
	"fmt"
	"testing"

	"github.com/usagebilling/billing/pkg/pricing"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkChargeRated projects charges in batches of 500 over 10 tenants:
// unit charges (their own amount) and graduated ones (each batch adds its
// quantities to the tenants' lines under the rows' locks first).
func BenchmarkChargeRated(b *testing.B) {
	ten := D("10")
	graduated := pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
		{UpTo: &ten, UnitPrice: D("0.1"), FlatFee: D("2")}, {UnitPrice: D("0.05")}}}
	for _, model := range []string{"unit", "graduated"} {
		b.Run(model, func(b *testing.B) {
			pool := pgtest.NewPool(b, Template)
			ib := NewInbox(b)
			feeds := make([]*Feed, 10)
			for i := range feeds {
				feeds[i] = NewFeed(b, fmt.Sprintf("t%d", i))
			}
			const batch = 500
			evs := make([]Event, 0, b.N)
			for i := range b.N {
				f := feeds[i%len(feeds)]
				u := f.Usage("api_calls", "USD", "3")
				if model == "unit" {
					evs = append(evs, f.Charge(u, "2026-11", "0.01"))
				} else {
					evs = append(evs, f.LineCharge(u, "2026-11", 1, graduated))
				}
			}
			b.ResetTimer()
			for start := 0; start < len(evs); start += batch {
				Decide(b, pool, ib, evs[start:min(start+batch, len(evs))]...)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
