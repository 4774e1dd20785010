package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/domain"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/services/query/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// fillFactMonths defines meter tokens (sum, by model) and inserts perMonth
// facts of it, tenant t1's, in each of months months up to this one,
// spread evenly over the month, each accepted when it occurred (its event
// id's time is its occurredAt), with one of 50 models. The last partitioned
// of those months have a partition each; the facts of the others go to the
// default (as the facts from before the partitioning; with partitioned 0,
// one table as before it). Then ANALYZE. It returns the first instant of
// the last month.
func fillFactMonths(tb testing.TB, pool *pgxpool.Pool, months, partitioned, perMonth int) time.Time {
	tb.Helper()
	ctx := tb.Context()
	first := monthpart.Start(time.Now()).AddDate(0, 1-months, 0)
	if _, err := pool.Exec(ctx, `INSERT INTO meter_definition (code, aggregation, dimensions, event_type, defined_at)
		VALUES ('tokens', 'sum', '{model}', 'tokens', now())`); err != nil {
		tb.Fatal(err)
	}
	if partitioned > 0 {
		t := migrations.FactMonths
		t.Ahead = partitioned - 1
		if _, err := t.Ensure(ctx, pool, first.AddDate(0, months-partitioned, 0)); err != nil {
			tb.Fatal(err)
		}
	}
	for m := range months {
		from := first.AddDate(0, m, 0)
		step := from.AddDate(0, 1, 0).Sub(from).Milliseconds() / int64(perMonth)
		if _, err := pool.Exec(ctx, `
			INSERT INTO usage_fact (tenant_id, source_system, source_event_id, meter_code, occurred_at, event_id,
			                        quantity, properties, dims)
			SELECT 't1', 'gw', $4 || '-' || g, 'tokens', to_timestamp(($1::bigint + g * $3::bigint) / 1000.0), `+monthparttest.FillIDs+`,
			       2, jsonb_build_object('model', 'm' || g % 50), ARRAY['m' || g % 50]
			FROM generate_series(1, $2::int) g, LATERAL (SELECT lpad(to_hex($1::bigint + g * $3::bigint), 12, '0') AS h) x`,
			from.UnixMilli(), perMonth, step, from.Format("200601")); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE usage_fact`); err != nil {
		tb.Fatal(err)
	}
	return first.AddDate(0, months-1, 0)
}

// kolkata is a day of hour windows in a zone whose offset is not whole
// hours: the fact rows answer it, whatever the aggregation.
func kolkata(tb testing.TB, day time.Time) domain.UsageQuery {
	tb.Helper()
	zone, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		tb.Fatal(err)
	}
	from := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, zone)
	return domain.UsageQuery{TenantID: "t1", MeterCode: "tokens", From: from, To: from.AddDate(0, 0, 1),
		WindowSize: domain.WindowHour, Zone: zone}
}

// A window read of the fact rows probes every live month, not the months
// that can hold the window: usage_fact is partitioned by the month a fact
// was accepted in, and occurredAt bounds no acceptance month (a late fact
// is accepted any time after; decision 0025, facts by month). Each month
// and the default are read by one index range scan of their window index
// per window, the rows from the index alone: the plan of the statement
// Usage builds, over four months of 20,000 facts, the first in the default.
func TestFactWindowReadsEachMonthByItsIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, Template)
	last := fillFactMonths(t, pool, 4, 3, 20000)
	q := kolkata(t, last.AddDate(0, 0, 10))
	sql, args := app.WindowStatement(catalog.Meter{Code: "tokens", Aggregation: catalog.Sum, Dimensions: []string{"model"}}, q, true)
	var starts, los, his []time.Time
	for w := domain.WindowStart(q.From, q.WindowSize, q.Zone); w.Before(q.To); w = domain.NextWindow(w, q.WindowSize, q.Zone) {
		starts, los, his = append(starts, w), append(los, w), append(his, domain.NextWindow(w, q.WindowSize, q.Zone))
	}
	rows, err := pool.Query(ctx, "EXPLAIN (COSTS OFF) "+sql, append(args, starts, los, his, nil, []string{}, 100)...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	months, err := migrations.FactMonths.Parts(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	scanned := map[string]bool{}
	for _, l := range lines {
		if strings.Contains(l, "Seq Scan") || strings.Contains(l, "Bitmap") {
			t.Fatalf("a scan that is not an index range scan:\n%s", strings.Join(lines, "\n"))
		}
		if i := strings.Index(l, "Index Only Scan using "); i >= 0 {
			if f := strings.Fields(l[i:]); len(f) >= 7 && f[5] == "on" {
				scanned[f[6]] = true
			}
		}
	}
	want := map[string]bool{"usage_fact_default": true}
	for _, m := range months {
		want[m.Name] = true
	}
	if fmt.Sprint(scanned) != fmt.Sprint(want) {
		t.Fatalf("partitions read by index: %v, want %v:\n%s", scanned, want, strings.Join(lines, "\n"))
	}
}

// BenchmarkFactWindowsByMonth is what probing every live month costs a
// read of fact rows: a day of hour windows in Asia/Kolkata (fact rows, 24
// windows in one statement, about 1/30 of a month's facts) of the last of
// months months of QUERY_MONTH_FACTS facts each (default 20,000), the
// same facts in one table (the default partition alone, as before the
// partitioning) and in a partition per month.
//
//	go test -run '^$' -bench FactWindowsByMonth ./internal/app/
func BenchmarkFactWindowsByMonth(b *testing.B) {
	perMonth := envInt(b, "QUERY_MONTH_FACTS", 20000)
	for _, months := range []int{3, 12} {
		for _, byMonth := range []bool{false, true} {
			layout, partitioned := "one-table", 0
			if byMonth {
				layout, partitioned = "by-month", months
			}
			b.Run(fmt.Sprintf("months=%d/%s", months, layout), func(b *testing.B) {
				pool := pgtest.NewPool(b, Template)
				last := fillFactMonths(b, pool, months, partitioned, perMonth)
				r := app.New(app.Deps{Pool: pool}, app.Config{})
				q := kolkata(b, last.AddDate(0, 0, 10))
				for b.Loop() {
					rep, err := r.Usage(b.Context(), q, 100, nil)
					if err != nil || len(rep.Rows) != 24 {
						b.Fatalf("%d rows, %v; want 24", len(rep.Rows), err)
					}
				}
			})
		}
	}
}
