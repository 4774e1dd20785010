package outbox_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkPurgeMonth compares the two ways a month of published events
// leaves outbox_event past the retention: "rows", the batched DELETE of
// Purge (1,000 rows a statement, the relay's PurgeBatch), and "drop",
// DropMonths. PURGE_MONTH_ROWS rows (100,000 unless set) of one month three
// months ago, each with a 300-byte envelope, are inserted, all published
// past the retention, then purged; it reports the purge's seconds and WAL
// bytes per month (one month per iteration).
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
	const retention = 24 * time.Hour
	for _, bc := range []struct {
		name  string
		purge func(b *testing.B, pool *pgxpool.Pool) int64
	}{
		{"rows", func(b *testing.B, pool *pgxpool.Pool) int64 {
			n, err := outbox.Purge(b.Context(), pool, retention, 1000)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}},
		{"drop", func(b *testing.B, pool *pgxpool.Pool) int64 {
			d, err := outbox.DropMonths(b.Context(), pool, time.Now(), retention)
			if err != nil {
				b.Fatal(err)
			}
			return d.Rows
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var secs, wal float64
			for range b.N {
				b.StopTimer()
				pool := pgtest.NewPool(b, outboxDB)
				ctx := b.Context()
				if _, err := outbox.EventMonths.Ensure(ctx, pool, month, 0); err != nil {
					b.Fatal(err)
				}
				// UUIDv7-shaped ids, one millisecond apart from the month's start.
				if _, err := pool.Exec(ctx, `
					INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, created_at, published_at)
					SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || substr(gen_random_uuid()::text, 14))::uuid,
					       'billing.usage.v1', g::text, g % 64, 'UsageAccepted', convert_to(repeat('x', 300), 'UTF8'), $2, $2
					FROM generate_series(1, $3::int) g,
					     LATERAL (SELECT lpad(to_hex($1::bigint + g), 12, '0') AS h) x`,
					month.UnixMilli(), month, rows); err != nil {
					b.Fatal(err)
				}
				for _, sql := range []string{`VACUUM ANALYZE outbox_event`, `CHECKPOINT`} {
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
				if left := count(b, pool, `SELECT count(*) FROM outbox_event`); left != 0 {
					b.Fatalf("%d rows left", left)
				}
			}
			b.ReportMetric(secs/float64(b.N), "s/month")
			b.ReportMetric(wal/float64(b.N), "WAL-B/month")
			b.ReportMetric(float64(rows), "rows/month")
		})
	}
}
