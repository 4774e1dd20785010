package app_test

import (
	"fmt"
	"testing"

	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkUsageAccepted decides UsageAccepted events in batches of 500 (one
// transaction each, as the runner does), over 10 tenants.
func BenchmarkUsageAccepted(b *testing.B) {
	pool := pgtest.NewPool(b, Template)
	ib := NewInbox(b)
	feeds := make([]*Feed, 10)
	for i := range feeds {
		feeds[i] = NewFeed(b, fmt.Sprintf("t%d", i))
	}
	const batch = 500
	evs := make([]Event, 0, b.N)
	for i := range b.N {
		evs = append(evs, feeds[i%len(feeds)].Usage("api_calls", "USD", "3"))
	}
	b.ResetTimer()
	for start := 0; start < len(evs); start += batch {
		Decide(b, pool, ib, evs[start:min(start+batch, len(evs))]...)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
