package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
			monthparttest.DeleteByKey(migrations.ChargeMonths, &month, "SET LOCAL session_replication_role = replica"),
			monthparttest.ArchiveAndDrop(migrations.ChargeMonths, &month, "invoice_charge_archive"),
		},
	})
}
