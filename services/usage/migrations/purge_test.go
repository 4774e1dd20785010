package migrations_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/services/usage/internal/usagetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkPurgeMonth compares the two ways to remove a month of facts
// (decision 0025): detaching and dropping its partition, and deleting its
// rows in batches of 10,000 as retention without partitions would. Each
// iteration fills a month partition with PURGE_MONTH_ROWS facts (default
// 1,000,000) and their identities, untimed, then purges it; it reports the
// WAL each way writes beside the time.
//
//	go test -run '^$' -bench PurgeMonth -benchtime 1x ./migrations/
func BenchmarkPurgeMonth(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("PURGE_MONTH_ROWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	for _, way := range []struct {
		name  string
		purge func(b *testing.B, pool *pgxpool.Pool, month time.Time)
	}{
		{"detach_drop", func(b *testing.B, pool *pgxpool.Pool, month time.Time) {
			name := "usage_fact_" + month.Format("2006_01")
			for _, q := range []string{`ALTER TABLE usage_fact DETACH PARTITION ` + name, `DROP TABLE ` + name} {
				if _, err := pool.Exec(b.Context(), q); err != nil {
					b.Fatalf("%s: %v", q, err)
				}
			}
		}},
		{"delete_batches", func(b *testing.B, pool *pgxpool.Pool, month time.Time) {
			for {
				tag, err := pool.Exec(b.Context(), `DELETE FROM usage_fact WHERE usage_id IN (
					SELECT usage_id FROM usage_fact
					WHERE usage_id >= usage_uuid7_floor($1) AND usage_id < usage_uuid7_floor($2)
					LIMIT 10000)`, month, month.AddDate(0, 1, 0))
				if err != nil {
					b.Fatal(err)
				}
				if tag.RowsAffected() == 0 {
					return
				}
			}
		}},
	} {
		b.Run(way.name, func(b *testing.B) {
			var wal int64
			for range b.N {
				b.StopTimer()
				pool := pgtest.NewPool(b, usagetest.Template)
				now := time.Now().UTC()
				month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 2, 0)
				fill(b, pool, month, n)
				before := lsn(b, pool)
				b.StartTimer()
				way.purge(b, pool, month)
				b.StopTimer()
				wal += lsn(b, pool) - before
				var left int
				if err := pool.QueryRow(b.Context(), `SELECT count(*) FROM usage_fact`).Scan(&left); err != nil || left != 0 {
					b.Fatalf("%d facts left, %v", left, err)
				}
			}
			b.ReportMetric(float64(n), "facts/op")
			b.ReportMetric(float64(wal)/float64(b.N)/(1<<20), "WAL-MiB/op")
		})
	}
}

// fill inserts n facts accepted in month (usage ids a millisecond apart
// from its start) and their identities, and analyzes the tables.
func fill(b *testing.B, pool *pgxpool.Pool, month time.Time, n int) {
	b.Helper()
	conn, err := pool.Acquire(b.Context()) // one session: the ids are a temporary table
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	for _, s := range []struct {
		q    string
		args []any
	}{
		{`CREATE TEMP TABLE ids AS
		  SELECT i, (lpad(to_hex((extract(epoch FROM $1::timestamptz) * 1000)::bigint + i), 12, '0')
		             || '70008000' || lpad(to_hex(i), 12, '0'))::uuid AS usage_id,
		         (lpad(to_hex((extract(epoch FROM $1::timestamptz) * 1000)::bigint + i), 12, '0')
		             || '70009000' || lpad(to_hex(i), 12, '0'))::uuid AS event_id
		  FROM generate_series(1, $2::int) AS i`, []any{month, n}},
		{`INSERT INTO usage_fact_source (tenant_id, source_system, source_event_id, usage_id, event_id)
		  SELECT 't1', 'gw', 'ev-' || i, usage_id, event_id FROM ids`, nil},
		{`INSERT INTO usage_fact (usage_id, tenant_id, source_system, source_event_id, meter_code, quantity,
		                          occurred_at, currency, event_id, accepted_at, properties)
		  SELECT usage_id, 't1', 'gw', 'ev-' || i, 'api', 1.5, $1::timestamptz, 'USD', event_id, $1::timestamptz, '{}'
		  FROM ids`, []any{month}},
		{`ANALYZE usage_fact`, nil},
	} {
		if _, err := conn.Exec(b.Context(), s.q, s.args...); err != nil {
			b.Fatalf("fill: %v", err)
		}
	}
}

func lsn(b *testing.B, pool *pgxpool.Pool) int64 {
	b.Helper()
	var l int64
	if err := pool.QueryRow(b.Context(), `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&l); err != nil {
		b.Fatal(err)
	}
	return l
}
