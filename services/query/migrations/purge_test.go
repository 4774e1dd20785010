package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/query/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkPurgeMonth compares the two ways a month of projected_event
// could leave the table once its usage and charges are on an issued
// invoice (decision 0025): "rows", deleting its rows in batches of 10,000
// by event id range, as a table without partitions would have to, and
// "drop", projected_event_archive (its check included) and DROP TABLE.
// PURGE_MONTH_ROWS events (100,000 unless set): half UsageAccepted, half
// their ChargeRated, and the InvoiceIssued they are on, all of one tenant
// and month (see monthparttest.BenchPurgeMonth).
//
//	PURGE_MONTH_ROWS=1000000 go test -run '^$' -bench 'PurgeMonth$' -benchtime 1x ./migrations/
func BenchmarkPurgeMonth(b *testing.B) {
	tmpl := pgtest.Template{Name: "query-months", Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, migrations.Set)
	}}
	var month time.Time
	monthparttest.BenchPurgeMonth(b, monthparttest.PurgeBench{
		Table:   migrations.EventMonths,
		NewPool: func(b *testing.B) *pgxpool.Pool { return pgtest.NewPool(b, tmpl) },
		Fill: func(b *testing.B, pool *pgxpool.Pool, m time.Time, rows int) {
			month = m
			// usages facts, a charge each (the first fact two, so that the
			// month holds exactly rows events), and their invoice.
			usages := rows/2 - 1
			charges := rows - usages - 1
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
				                               occurred_at, subject_id, period, meter_code, quantity, payload)
				  SELECT ` + monthparttest.FillIDs + `, 'UsageAccepted', 't1', 'usage', 'x', 1, now(), gen_random_uuid(),
				         '2026-09', 'api', 2, '{"sourceSystem": "gw", "quantity": "2"}'
				  FROM ` + monthparttest.FillFrom("$2"), []any{m.UnixMilli(), usages}},
				{`INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
				                               occurred_at, subject_id, origin_event_id, period, meter_code, currency,
				                               quantity, unit_price, amount, payload)
				  SELECT ` + monthparttest.FillIDs + `, 'ChargeRated', 't1', 'charge', 'x', 1, now(), gen_random_uuid(),
				         u.event_id, '2026-09', 'api', 'USD', 2, 0.1675, 0.335, '{"aggregation": "sum"}'
				  FROM (SELECT event_id, row_number() OVER (ORDER BY event_id) AS n FROM projected_event) u
				  JOIN generate_series(1, $3::int) g ON u.n = (g - 1) % $2::bigint + 1,
				       LATERAL (SELECT lpad(to_hex($1::bigint + $2::bigint + g), 12, '0') AS h) x`,
					[]any{m.UnixMilli(), usages, charges}},
				{`INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
				                               occurred_at, subject_id, period, currency, amount, payload)
				  SELECT ` + monthparttest.FillIDs + `, 'InvoiceIssued', 't1', 'invoice', 'x', 1, now(), gen_random_uuid(),
				         '2026-09', 'USD', 1, '{}'
				  FROM (SELECT lpad(to_hex($1::bigint + $2::bigint + 1), 12, '0') AS h) x`, []any{m.UnixMilli(), rows}},
			} {
				if _, err := pool.Exec(b.Context(), q.sql, q.args...); err != nil {
					b.Fatal(err)
				}
			}
		},
		Ways: []monthparttest.Way{
			monthparttest.DeleteByKey(migrations.EventMonths, &month),
			monthparttest.ArchiveAndDrop(migrations.EventMonths, &month, "projected_event_archive"),
		},
	})
}

// BenchmarkPurgeMonthOfFacts is BenchmarkPurgeMonth for usage_fact, the
// usage analytics' fact rows (decision 0025): "rows", deleting the month's
// facts in batches of 10,000 by event id range (usage_fact has no index on
// event_id, as it had none before: each batch finds its rows by a scan of
// the month), against "drop", projected_event_archive (the facts' part:
// the check that every fact's meter is known, their spans per tenant and
// meter, the detach; the month's projected_event partition is there and
// empty) and DROP TABLE of each partition it detached. PURGE_MONTH_ROWS
// facts (100,000 unless set) of one tenant, meter and month, each with one
// dimension value and two properties.
//
//	PURGE_MONTH_ROWS=1000000 go test -run '^$' -bench PurgeMonthOfFacts -benchtime 1x ./migrations/
func BenchmarkPurgeMonthOfFacts(b *testing.B) {
	tmpl := pgtest.Template{Name: "query-months", Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, migrations.Set)
	}}
	var month time.Time
	eventMonths := migrations.EventMonths
	eventMonths.Ahead = 0
	monthparttest.BenchPurgeMonth(b, monthparttest.PurgeBench{
		Table:   migrations.FactMonths,
		NewPool: func(b *testing.B) *pgxpool.Pool { return pgtest.NewPool(b, tmpl) },
		Fill: func(b *testing.B, pool *pgxpool.Pool, m time.Time, rows int) {
			month = m
			if _, err := eventMonths.Ensure(b.Context(), pool, m); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(b.Context(), `
				INSERT INTO usage_fact (tenant_id, source_system, source_event_id, meter_code, occurred_at, event_id,
				                        quantity, properties, dims)
				SELECT 't1', 'gw', 'ev-' || g, 'tokens', to_timestamp(($1::bigint + g) / 1000.0), `+monthparttest.FillIDs+`,
				       2, jsonb_build_object('model', 'm' || g % 50, 'region', 'eu'), ARRAY['m' || g % 50]
				FROM `+monthparttest.FillFrom("$2"), m.UnixMilli(), rows); err != nil {
				b.Fatal(err)
			}
		},
		Ways: []monthparttest.Way{
			monthparttest.DeleteByKey(migrations.FactMonths, &month),
			{Name: "drop", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
				ctx := b.Context()
				var n int64
				if err := pool.QueryRow(ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass`,
					monthpart.MonthOf("usage_fact", month).Name).Scan(&n); err != nil {
					b.Fatal(err)
				}
				rows, err := pool.Query(ctx, `SELECT projected_event_archive($1)`, month)
				if err != nil {
					b.Fatal(err)
				}
				names, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil || len(names) != 2 {
					b.Fatalf("archived %v, %v; want projected_event's month and usage_fact's", names, err)
				}
				for _, name := range names {
					if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize()); err != nil {
						b.Fatal(err)
					}
				}
				return n
			}},
		},
	})
}
