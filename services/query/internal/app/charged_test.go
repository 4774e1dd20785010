package app_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/query/internal/app"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestChargedAgreesWithTheLinesOfEveryAggregation: the summary's charged is
// the sum over the invoice's charge lines (meter, price version, price
// dimensions) of the line's pricing over its quantity under the meter's
// aggregation (catalog.Aggregate over the line's charges), whatever the
// order the charges arrive in, in batches, each batch's first charge twice;
// unpriced charges add nothing.
func TestChargedAgreesWithTheLinesOfEveryAggregation(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	ten, hundred := D("10"), D("100")
	graduated := pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
		{UpTo: &ten, UnitPrice: D("0.5"), FlatFee: D("3")}, {UpTo: &hundred, UnitPrice: D("0.25")}, {UnitPrice: D("0.1")}}}
	volume := pricing.Pricing{Model: pricing.Volume, Tiers: []pricing.Tier{
		{UpTo: &ten, UnitPrice: D("2")}, {UnitPrice: D("1"), FlatFee: D("4")}}}
	unit := pricing.UnitPricing(D("0.75"))
	type line struct {
		meter, aggregation string
		version            int64
		pricing            pricing.Pricing
		dims               map[string]string
		unpriced           bool
	}
	lines := []line{
		{"tokens", catalog.Sum, 1, graduated, nil, false},
		{"tokens", catalog.Sum, 1, graduated, map[string]string{"model": "gpt-4"}, false},
		{"tokens", catalog.Sum, 2, unit, nil, false},
		{"calls", catalog.Count, 1, unit, nil, false},
		{"calls", catalog.Count, 2, graduated, nil, false},
		{"peak_seats", catalog.Max, 1, unit, nil, false},
		{"peak_seats", catalog.Max, 2, volume, map[string]string{"model": "gpt-4"}, false},
		{"storage", catalog.Latest, 1, volume, nil, false},
		{"storage", catalog.Latest, 2, unit, map[string]string{"model": "claude"}, false},
		{"active_users", catalog.UniqueCount, 1, graduated, nil, false},
		{"active_users", catalog.UniqueCount, 2, unit, map[string]string{"model": "gpt-4"}, false},
		{"active_users", catalog.UniqueCount, 0, pricing.Pricing{}, nil, true},
	}
	rng := rand.New(rand.NewPCG(4, 21))
	f := NewFeed(t, "acme")
	at := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	want := decimal.Zero
	var evs []Event
	for li, l := range lines {
		agg := catalog.NewAggregate(l.aggregation)
		for i := range 40 {
			if i%7 != 6 {
				at = at.Add(time.Duration(rng.IntN(3)) * time.Second) // equal occurredAts: latest's tie-break
			}
			id := fmt.Sprintf("l%02d-%03d", li, rng.IntN(1000))
			qty := decimal.New(rng.Int64N(3000), -2)
			user := fmt.Sprintf("u%d", rng.IntN(15))
			u := f.Fact(l.meter, qty.String(), at, id+fmt.Sprint(i), map[string]string{"model": "gpt-4", "user": user})
			var c Event
			if l.unpriced {
				c = f.UnpricedCharge(u, "2026-11", l.aggregation, user)
			} else {
				c = f.AggregateCharge(u, "2026-11", l.aggregation, l.version, l.pricing, l.dims, user)
			}
			agg.Add(catalog.Observation{Quantity: qty, OccurredAt: at, SourceSystem: "test", SourceEventID: id + fmt.Sprint(i), Value: user})
			evs = append(evs, u, c)
		}
		if !l.unpriced {
			want = want.Add(l.pricing.Amount(agg.Quantity()))
		}
	}
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	for i := 0; i < len(evs); i += 7 {
		batch := evs[i:min(i+7, len(evs))]
		Decide(t, pool, ib, append(slices.Clone(batch), batch[0])...)
	}
	s, err := app.New(app.Deps{Pool: pool}, app.Config{}).Summary(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Charged["USD"]; !got.Equal(want) {
		t.Fatalf("charged %s, the lines price to %s", got, want)
	}
}
