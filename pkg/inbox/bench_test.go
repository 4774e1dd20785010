package inbox_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// BenchmarkDecide decides batches of 500 fresh events, each in one
// transaction committed like the runner commits it, with a handler that
// inserts one row. "one_deferral" puts one DeferUntil in the middle of each
// batch, which takes the savepoint fallback; "all_deferred" makes every event
// of the batch wait for a missing fact; "one_gap" puts one version gap in the
// middle, which needs no fallback.
func BenchmarkDecide(b *testing.B) {
	const batch = 500
	for _, bc := range []struct {
		name string
		odd  func(b *testing.B, i int) []byte
	}{
		{"fresh", nil},
		{"one_deferral", func(b *testing.B, i int) []byte {
			return raw(b, ev(b, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("d"), Needs: "never"}))
		}},
		{"all_deferred", func(b *testing.B, i int) []byte {
			return raw(b, ev(b, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("d"), Needs: "never"}))
		}},
		{"one_gap", func(b *testing.B, i int) []byte {
			return raw(b, ev(b, "Noted", 1, uuid.NewString(), 2, note{Origin: origin("g")}))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pool := pgtest.NewPool(b, tmpl)
			ib := newInbox(b, inbox.Options{})
			ctx := b.Context()
			// inbox_event as a service lays it out: this week's partition
			// and the next beside the default.
			if _, err := inbox.EnsureParts(ctx, pool, time.Now()); err != nil {
				b.Fatal(err)
			}
			decideBatches(b, ib, pool, batch, func(i int) []byte {
				if bc.odd != nil && (i == batch/2 || bc.name == "all_deferred") {
					return bc.odd(b, i)
				}
				return raw(b, ev(b, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("b")}))
			})
		})
	}
}

// BenchmarkDecideSteadyState decides batches of 500 fresh events, as
// BenchmarkDecide's "fresh" does, against an inbox_event that holds what a
// service's does in steady state: three past weeks and the current one,
// INBOX_BENCH_WEEK_ROWS rows each (default 300,000), of aggregates whose
// ids are UUIDv7 minted with their events, as usage facts and charges are.
// BenchmarkDecide's fresh database has none, so its claims probe empty
// partitions for holders of their slots in other weeks; here they probe
// full ones, unless the aggregate type is minted (Options.MintedAggregates):
// "minted" looks for holders only since the aggregates' ids, "not_minted"
// in every week.
func BenchmarkDecideSteadyState(b *testing.B) {
	for _, minted := range []bool{true, false} {
		name := map[bool]string{true: "minted", false: "not_minted"}[minted]
		b.Run(name, func(b *testing.B) {
			opts := inbox.Options{}
			if minted {
				opts.MintedAggregates = []string{"thing"}
			}
			benchSteadyState(b, opts)
		})
	}
}

func benchSteadyState(b *testing.B, opts inbox.Options) {
	const batch = 500
	weekRows := 300_000
	if s := os.Getenv("INBOX_BENCH_WEEK_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("INBOX_BENCH_WEEK_ROWS=%q: want a positive number of rows", s)
		}
		weekRows = n
	}
	pool := pgtest.NewPool(b, tmpl)
	ib := newInbox(b, opts)
	ctx := b.Context()
	now := time.Now()
	for w := 3; w >= 0; w-- {
		at := now.AddDate(0, 0, -7*w)
		if _, err := inbox.EnsureParts(ctx, pool, at); err != nil {
			b.Fatal(err)
		}
		// Ids (and aggregate ids) minted a millisecond apart from the start
		// of the week at.
		_, err := pool.Exec(ctx, `
			INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version)
			SELECT u, 'digest', 'Noted', 't1', 'thing', u::text, 1
			FROM (SELECT (lpad(to_hex($1::bigint + g), 12, '0') || '7000' || '8000' || lpad(to_hex(g), 12, '0'))::uuid AS u
			      FROM generate_series(1, $2::int) g) ids`,
			inbox.EventParts.Span.Start(at).UnixMilli(), weekRows)
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE inbox_event`); err != nil {
		b.Fatal(err)
	}
	decideBatches(b, ib, pool, batch, func(int) []byte {
		return raw(b, ev(b, "Noted", 1, uuid.Must(uuid.NewV7()).String(), 1, note{Origin: origin("b")}))
	})
}

// decideBatches decides and commits, for each of b's iterations, a batch of
// n events, the i-th made by event(i) (outside the timer), and reports the
// events decided per second.
func decideBatches(b *testing.B, ib *inbox.Inbox, pool *pgxpool.Pool, n int, event func(i int) []byte) {
	events := 0
	for b.Loop() {
		b.StopTimer()
		raws := make([][]byte, n)
		for i := range raws {
			raws[i] = event(i)
		}
		ms := msgs(raws...)
		b.StartTimer()
		if _, err := ib.DecideCommit(b.Context(), pool, ms); err != nil {
			b.Fatal(err)
		}
		events += n
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkHandlersOnly runs the same handler on batches of 500 decoded
// events without the inbox: the floor BenchmarkDecide is measured against.
func BenchmarkHandlersOnly(b *testing.B) {
	const batch = 500
	pool := pgtest.NewPool(b, tmpl)
	reg := newRegistry()
	h := handlers(true)["Noted"]
	ctx := b.Context()
	events := 0
	for b.Loop() {
		b.StopTimer()
		raws := make([][]byte, batch)
		for i := range raws {
			raws[i] = raw(b, ev(b, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("b")}))
		}
		b.StartTimer()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, r := range raws {
				d, err := reg.Decode(r)
				if err != nil {
					return err
				}
				if _, err := h(ctx, tx, d); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		events += batch
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
