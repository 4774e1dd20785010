package inbox_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
			events := 0
			for b.Loop() {
				b.StopTimer()
				raws := make([][]byte, batch)
				for i := range raws {
					if bc.odd != nil && (i == batch/2 || bc.name == "all_deferred") {
						raws[i] = bc.odd(b, i)
						continue
					}
					raws[i] = raw(b, ev(b, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("b")}))
				}
				ms := msgs(raws...)
				b.StartTimer()
				if _, err := ib.DecideCommit(ctx, pool, ms); err != nil {
					b.Fatal(err)
				}
				events += batch
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
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
