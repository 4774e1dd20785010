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
	"github.com/usagebilling/billing/services/invoice/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkPurgeMonth compares the two ways a month of invoice_charge could
// leave the table once its invoices are issued (decision 0025): "rows",
// deleting its rows in batches of 10,000 by origin id range, as a table
// without partitions would have to (with the immutability trigger skipped,
// as only the owner could), and "drop", invoice_charge_archive and DROP
// TABLE. PURGE_MONTH_ROWS charges (100,000 unless set) of one tenant's
// issued invoice (see monthparttest.BenchPurgeMonth).
//
//	PURGE_MONTH_ROWS=1000000 go test -run '^$' -bench PurgeMonth -benchtime 1x ./migrations/
func BenchmarkPurgeMonth(b *testing.B) {
	tmpl := pgtest.Template{Name: "invoice-months", Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, migrations.Set)
	}}
	var month time.Time
	monthparttest.BenchPurgeMonth(b, monthparttest.PurgeBench{
		Table:   migrations.ChargeMonths,
		NewPool: func(b *testing.B) *pgxpool.Pool { return pgtest.NewPool(b, tmpl) },
		Fill: func(b *testing.B, pool *pgxpool.Pool, m time.Time, rows int) {
			month = m
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO invoice_charge (origin_event_id, charge_id, usage_event_id, tenant_id, period, currency,
				                              meter_code, price_version, unit_price, quantity, amount)
				  SELECT ` + monthparttest.FillIDs + `, gen_random_uuid(), gen_random_uuid(), 't1', '2026-09', 'USD',
				         'api', 1, 0.1675, 2, 0.335
				  FROM ` + monthparttest.FillFrom("$2"), []any{m.UnixMilli(), rows}},
				{`INSERT INTO invoice (invoice_id, tenant_id, period, currency, status, subtotal, total, issued_at,
				                       close_event_id, issued_event_id, number)
				  VALUES (gen_random_uuid(), 't1', '2026-09', 'USD', 'issued', 1, 1, now(), gen_random_uuid(),
				          gen_random_uuid(), 1)`, nil},
			} {
				if _, err := pool.Exec(b.Context(), q.sql, q.args...); err != nil {
					b.Fatal(err)
				}
			}
		},
		Ways: []monthparttest.Way{
			{Name: "rows", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
				lo, hi := monthpart.Bound(month), monthpart.Bound(month.AddDate(0, 1, 0))
				var total int64
				for {
					var n int64
					err := pgx.BeginFunc(b.Context(), pool, func(tx pgx.Tx) error {
						if _, err := tx.Exec(b.Context(), `SET LOCAL session_replication_role = replica`); err != nil {
							return err
						}
						tag, err := tx.Exec(b.Context(), `DELETE FROM invoice_charge WHERE origin_event_id IN (
							SELECT origin_event_id FROM invoice_charge
							WHERE origin_event_id >= $1 AND origin_event_id < $2 LIMIT 10000)`, lo, hi)
						n = tag.RowsAffected()
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					total += n
					if n == 0 {
						return total
					}
				}
			}},
			{Name: "drop", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
				var n int64
				var name string
				ctx := b.Context()
				// The rows dropped, as the VACUUM before the purge counted them
				// (not timed as a count of the month would be).
				if err := pool.QueryRow(ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass`,
					monthpart.MonthOf("invoice_charge", month).Name).Scan(&n); err != nil {
					b.Fatal(err)
				}
				if err := pool.QueryRow(ctx, `SELECT invoice_charge_archive($1)`, month).Scan(&name); err != nil {
					b.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize()); err != nil {
					b.Fatal(err)
				}
				return n
			}},
		},
	})
}
