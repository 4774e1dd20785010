package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
//	PURGE_MONTH_ROWS=1000000 go test -run '^$' -bench PurgeMonth -benchtime 1x ./migrations/
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
