package outbox_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkPurgeMonth compares the two ways a month of sent events,
// each with a 300-byte envelope, leaves outbox_event past the retention:
// "rows", the batched DELETE of Purge (1,000 rows a statement, the relay's
// PurgeBatch), and "drop", DropParts (see monthparttest.BenchPurgeMonth).
func BenchmarkPurgeMonth(b *testing.B) {
	const retention = 24 * time.Hour
	monthparttest.BenchPurgeMonth(b, monthparttest.PurgeBench{
		Table:   outbox.EventParts,
		NewPool: func(b *testing.B) *pgxpool.Pool { return pgtest.NewPool(b, outboxDB) },
		Fill: func(b *testing.B, pool *pgxpool.Pool, month time.Time, rows int) {
			if _, err := pool.Exec(b.Context(), `
				INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, created_at)
				SELECT `+monthparttest.FillIDs+`,
				       'billing.usage.v1', g::text, g % 64, 'UsageAccepted', convert_to(repeat('x', 300), 'UTF8'), $2
				FROM `+monthparttest.FillFrom("$3"), month.UnixMilli(), month, rows); err != nil {
				b.Fatal(err)
			}
		},
		Ways: []monthparttest.Way{
			{Name: "rows", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
				n, err := outbox.Purge(b.Context(), pool, retention, 1000)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}},
			{Name: "drop", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
				d, err := outbox.DropParts(b.Context(), pool, time.Now(), retention)
				if err != nil {
					b.Fatal(err)
				}
				return d.Rows
			}},
		},
	})
}
