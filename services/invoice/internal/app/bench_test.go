package app_test

import (
	"fmt"
	"testing"

	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkChargeRated decides ChargeRated events in batches of 500 (one
// transaction each, as the runner does), over 10 tenant periods.
func BenchmarkChargeRated(b *testing.B) {
	pool := pgtest.NewPool(b, Template)
	ib := NewInbox(b)
	periods := make([]*Period, 10)
	for i := range periods {
		periods[i] = NewPeriod(b, fmt.Sprintf("t%d", i), "2026-11")
	}
	const batch = 500
	raws := make([][]byte, 0, b.N)
	for i := range b.N {
		raws = append(raws, Raw(b, periods[i%len(periods)].Charge("USD", "3", "0.0125"))...)
	}
	b.ResetTimer()
	for start := 0; start < len(raws); start += batch {
		DecideRaw(b, pool, ib, raws[start:min(start+batch, len(raws))]...)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
