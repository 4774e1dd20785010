package inbox_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkPurgeMonth compares the two ways a month of decided events
// leaves inbox_event past the retention: "rows", the batched DELETE of
// PurgeEvents (1,000 rows a statement, as the service's retention batches
// them), and "drop", DropMonths. PURGE_MONTH_ROWS rows (100,000 unless set)
// of one month three months ago are inserted, all past the retention, then
// purged; it reports the purge's seconds and WAL bytes per month (one
// month per iteration).
func BenchmarkPurgeMonth(b *testing.B) {
	rows := 100_000
	if s := os.Getenv("PURGE_MONTH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		rows = n
	}
	month := monthpart.Start(time.Now()).AddDate(0, -3, 0)
	cutoff := time.Now().Add(-14 * 24 * time.Hour)
	for _, bc := range []struct {
		name  string
		purge func(b *testing.B, pool *pgxpool.Pool) int64
	}{
		{"rows", func(b *testing.B, pool *pgxpool.Pool) int64 {
			var total int64
			for {
				n, err := inbox.PurgeEvents(b.Context(), pool, cutoff, []string{"price", "invoice"}, 1000)
				if err != nil {
					b.Fatal(err)
				}
				total += n
				if n < 1000 {
					return total
				}
			}
		}},
		{"drop", func(b *testing.B, pool *pgxpool.Pool) int64 {
			_, n, err := inbox.DropMonths(b.Context(), pool, cutoff, []string{"price", "invoice"})
			if err != nil {
				b.Fatal(err)
			}
			return n
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var secs, wal float64
			for range b.N {
				b.StopTimer()
				pool := pgtest.NewPool(b, tmpl)
				ctx := b.Context()
				if _, err := inbox.EventMonths.Ensure(ctx, pool, month, 0); err != nil {
					b.Fatal(err)
				}
				// UUIDv7-shaped ids, one millisecond apart from the month's start.
				if _, err := pool.Exec(ctx, `
					INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id, aggregate_type,
					                         aggregate_id, aggregate_version, applied_at)
					SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || substr(gen_random_uuid()::text, 14))::uuid,
					       'sha256:0000000000000000000000000000000000000000000000000000000000000000',
					       'UsageAccepted', 't1', 'usage', g::text, 1, $2
					FROM generate_series(1, $3::int) g,
					     LATERAL (SELECT lpad(to_hex($1::bigint + g), 12, '0') AS h) x`,
					month.UnixMilli(), month, rows); err != nil {
					b.Fatal(err)
				}
				for _, sql := range []string{`VACUUM ANALYZE inbox_event`, `CHECKPOINT`} {
					if _, err := pool.Exec(ctx, sql); err != nil {
						b.Fatal(err)
					}
				}
				var lsn string
				if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				b.StartTimer()
				n := bc.purge(b, pool)
				b.StopTimer()
				secs += time.Since(start).Seconds()
				var bytes float64
				if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8`, lsn).Scan(&bytes); err != nil {
					b.Fatal(err)
				}
				wal += bytes
				if n != int64(rows) {
					b.Fatalf("purged %d rows, want %d", n, rows)
				}
				if left := count(b, pool, `SELECT count(*) FROM inbox_event`); left != 0 {
					b.Fatalf("%d rows left", left)
				}
			}
			b.ReportMetric(secs/float64(b.N), "s/month")
			b.ReportMetric(wal/float64(b.N), "WAL-B/month")
			b.ReportMetric(float64(rows), "rows/month")
		})
	}
}
