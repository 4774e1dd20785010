package inbox_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkPurgeMonth compares the two ways a month of decided events
// leaves inbox_event past the retention: "rows", the batched DELETE of
// PurgeEvents (1,000 rows a statement, as the service's retention batches
// them), and "drop", DropParts (see monthparttest.BenchPurgeMonth).
func BenchmarkPurgeMonth(b *testing.B) {
	cutoff := time.Now().Add(-14 * 24 * time.Hour)
	keep := []string{"price", "invoice"}
	monthparttest.BenchPurgeMonth(b, monthparttest.PurgeBench{
		Table:   inbox.EventParts,
		NewPool: func(b *testing.B) *pgxpool.Pool { return pgtest.NewPool(b, tmpl) },
		Fill: func(b *testing.B, pool *pgxpool.Pool, month time.Time, rows int) {
			if _, err := pool.Exec(b.Context(), `
				INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id, aggregate_type,
				                         aggregate_id, aggregate_version, applied_at)
				SELECT `+monthparttest.FillIDs+`,
				       'sha256:0000000000000000000000000000000000000000000000000000000000000000',
				       'UsageAccepted', 't1', 'usage', g::text, 1, $2
				FROM `+monthparttest.FillFrom("$3"), month.UnixMilli(), month, rows); err != nil {
				b.Fatal(err)
			}
		},
		Ways: []monthparttest.Way{
			{Name: "rows", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
				var total int64
				for {
					n, err := inbox.PurgeEvents(b.Context(), pool, cutoff, keep, 1000)
					if err != nil {
						b.Fatal(err)
					}
					total += n
					if n < 1000 {
						return total
					}
				}
			}},
			{Name: "drop", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
				_, n, err := inbox.DropParts(b.Context(), pool, cutoff, keep)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}},
		},
	})
}
