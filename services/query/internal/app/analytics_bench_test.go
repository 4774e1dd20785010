package app_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/domain"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestUsageAnalyticsAtScale measures the analytics on one tenant with
// QUERY_ANALYTICS_FACTS facts (default 5,000, so it runs fast; the figures
// in the README are at 1,000,000) of each of two meters over November 2026,
// each fact with 3 dimensions of 50 values (model, region, customer, drawn
// uniformly) and, for the unique_count meter, one of QUERY_ANALYTICS_USERS
// users (default 10,000). The facts are loaded through the projection's own
// apply path for facts (app.ProjectFacts: the usage_fact row and the hourly
// rollup, as the batch handler writes them; not the per-event
// projected_event and summary rows, which the analytics do not read), in
// batches of 2,000, then VACUUM ANALYZE (what autovacuum does after a load).
// It times every page of the month at hour windows grouped by model (limit
// 100 and 1000) and the month at day windows of unique_count (one page of
// 31 rows; run 20 times), and prints p50/p99 with the conditions. It asserts
// the rows' count and totals, never a time.
func TestUsageAnalyticsAtScale(t *testing.T) {
	n := envInt(t, "QUERY_ANALYTICS_FACTS", 5000)
	users := envInt(t, "QUERY_ANALYTICS_USERS", 10000)
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	dims := []string{"model", "region", "customer"}
	Decide(t, pool, ib, Meter(t, "tokens", catalog.Sum, "", dims...), Meter(t, "active_users", catalog.UniqueCount, "user", dims...))
	month := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	end := month.AddDate(0, 1, 0)
	rng := rand.New(rand.NewPCG(1, 1))
	total := decimal.Zero
	loadStart := time.Now()
	const batch = 2000
	for _, meter := range []string{"tokens", "active_users"} {
		for i := 0; i < n; i += batch {
			ds := make([]*envelope.Decoded, 0, batch)
			for j := i; j < min(i+batch, n); j++ {
				at := month.Add(time.Duration(rng.Int64N(int64(end.Sub(month)))))
				props := map[string]string{"model": "m" + strconv.Itoa(rng.IntN(50)), "region": "r" + strconv.Itoa(rng.IntN(50)),
					"customer": "c" + strconv.Itoa(rng.IntN(50)), "user": "u" + strconv.Itoa(rng.IntN(users))}
				qty := decimal.New(rng.Int64N(10000)+1, -1)
				if meter == "tokens" {
					total = total.Add(qty)
				}
				ds = append(ds, &envelope.Decoded{
					Envelope: envelope.Envelope{EventID: uuid.New(), EventType: events.TypeUsageAccepted, TenantID: "bench", OccurredAt: at},
					Payload: events.UsageAccepted{UsageID: uuid.New(), SourceSystem: "bench", SourceEventID: fmt.Sprintf("%s-%d", meter, j),
						MeterCode: meter, Quantity: qty, OccurredAt: at, Currency: "USD", Properties: props}})
			}
			if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return app.ProjectFacts(t.Context(), tx, ds) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(t.Context(), "VACUUM ANALYZE usage_fact, usage_hourly, usage_distinct_day"); err != nil {
		t.Fatal(err)
	}
	var hourly int64
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM usage_hourly").Scan(&hourly); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d facts of each of 2 meters (%d hourly rollup rows) in %s", n, hourly, time.Since(loadStart).Round(time.Second))

	r := app.New(app.Deps{Pool: pool}, app.Config{})
	for _, limit := range []int{100, 1000} {
		q := domain.UsageQuery{TenantID: "bench", MeterCode: "tokens", From: month, To: end, WindowSize: domain.WindowHour, GroupBy: []string{"model"}}
		var times []time.Duration
		var after *domain.UsagePosition
		rows, sum := 0, decimal.Zero
		for {
			start := time.Now()
			rep, err := r.Usage(t.Context(), q, limit, after)
			times = append(times, time.Since(start))
			if err != nil {
				t.Fatal(err)
			}
			for _, row := range rep.Rows {
				sum = sum.Add(row.Value)
			}
			rows += len(rep.Rows)
			if rep.Next == nil {
				break
			}
			after = rep.Next
		}
		if !sum.Equal(total) {
			t.Fatalf("the rows sum to %s, the facts to %s", sum, total)
		}
		t.Logf("sum, a month at hour windows grouped by model, limit %d: %d rows in %d pages; per page %s",
			limit, rows, len(times), percentiles(times))
	}
	for _, c := range []struct {
		name    string
		groupBy []string
	}{{"no group", nil}, {"grouped by model", []string{"model"}}} {
		q := domain.UsageQuery{TenantID: "bench", MeterCode: "active_users", From: month, To: end, WindowSize: domain.WindowDay, GroupBy: c.groupBy}
		var times []time.Duration
		rows := 0
		for range 20 {
			var after *domain.UsagePosition
			rows = 0
			for {
				start := time.Now()
				rep, err := r.Usage(t.Context(), q, 1000, after)
				times = append(times, time.Since(start))
				if err != nil {
					t.Fatal(err)
				}
				rows += len(rep.Rows)
				if rep.Next == nil {
					break
				}
				after = rep.Next
			}
		}
		t.Logf("unique_count (%d users), a month at day windows, %s: %d rows; per page (20 runs) %s", users, c.name, rows, percentiles(times))
	}
}

func percentiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%d pages)", at(0.50).Round(time.Microsecond*10),
		at(0.99).Round(time.Microsecond*10), s[len(s)-1].Round(time.Microsecond*10), len(s))
}

func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}
