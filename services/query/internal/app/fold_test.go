package app_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/services/query/internal/app"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The summary stays exact while the background folder runs concurrently with
// the consumer's writes: after each committed batch it counts exactly what
// was committed, and every read in between sees a consistent snapshot
// (between what was committed before and after it, usage and charges of the
// same batches together), whether the rows were folded yet or not. The
// folder works in chunks of 7 deltas, a batch being 50: a read lands
// between the chunks of a fold too.
func TestSummaryExactWhileFolderRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const batches, size = 40, 25
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	price := D("0.0125")
	Decide(t, pool, ib, f.Price("api_calls", "USD", price.String()))
	svc := app.New(app.Deps{Pool: pool}, app.Config{FoldChunk: 7})

	// started is raised before a batch commits and committed after: a read
	// can land between a batch's commit and the raise of committed, so a
	// snapshot is bounded by committed before the read and started after it.
	var started, committed atomic.Int64
	var folds, reads atomic.Int64
	// After each batch the writer waits for a fold and a read that began
	// after its commit, so the three interleave however slow the machine is.
	foldBeat, readBeat := newBeat(), newBeat()
	stop, quit := make(chan struct{}), make(chan struct{}) // quit: a goroutine failed
	var quitOnce sync.Once
	fail := func() { quitOnce.Do(func() { close(quit) }) }
	var wg sync.WaitGroup
	wg.Go(func() { // the folder, flat out
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := svc.FoldOnce(ctx)
			if err != nil {
				t.Errorf("fold: %v", err)
				fail()
				return
			}
			folds.Add(int64(n))
			foldBeat.tick()
		}
	})
	wg.Go(func() { // a reader, checking each snapshot
		for {
			select {
			case <-stop:
				return
			default:
			}
			before := committed.Load()
			s, err := svc.Summary(ctx, "acme")
			after := started.Load()
			if err != nil {
				t.Errorf("read: %v", err)
				fail()
				return
			}
			reads.Add(1)
			n := s.UsageCount
			if n < before || n > after || n%size != 0 {
				t.Errorf("read %d usage facts with %d committed and %d started (batches of %d)", n, before, after, size)
				fail()
				return
			}
			if !s.QuantityByMeter["api_calls"].Equal(decimal.NewFromInt(n)) && n > 0 ||
				!s.Charged["USD"].Equal(price.Mul(decimal.NewFromInt(n))) && n > 0 {
				t.Errorf("inconsistent snapshot: %d facts, quantity %s, charged %s", n, s.QuantityByMeter["api_calls"], s.Charged["USD"])
				fail()
				return
			}
			readBeat.tick()
		}
	})

	for range batches {
		var evs []Event
		for range size {
			u := f.Usage("api_calls", "USD", "1")
			evs = append(evs, u, f.Charge(u, "2026-11", price.String()))
		}
		started.Add(size)
		Decide(t, pool, ib, evs...)
		n := committed.Add(size)
		s, err := svc.Summary(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if s.UsageCount != n || !s.QuantityByMeter["api_calls"].Equal(decimal.NewFromInt(n)) ||
			!s.Charged["USD"].Equal(price.Mul(decimal.NewFromInt(n))) {
			t.Fatalf("after %d facts: %+v", n, s)
		}
		// The round running now may have begun before the commit; the one
		// after it began after.
		for _, b := range []*beat{foldBeat, foldBeat, readBeat, readBeat} {
			select {
			case <-b.next():
			case <-quit:
			}
		}
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	if folds.Load() == 0 || reads.Load() == 0 {
		t.Fatalf("not proven: %d folds and %d concurrent reads during the writes", folds.Load(), reads.Load())
	}
	// A last fold leaves no delta, and the figures do not move.
	if _, err := svc.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM summary_delta`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d deltas left after the last fold, %v", left, err)
	}
	s, err := svc.Summary(ctx, "acme")
	if err != nil || s.UsageCount != batches*size || !s.Charged["USD"].Equal(price.Mul(decimal.NewFromInt(batches*size))) {
		t.Fatalf("final summary %+v, %v", s, err)
	}
	t.Logf("%d tenant folds and %d reads ran during %d batches", folds.Load(), reads.Load(), batches)
}

// beat tells the rounds of a loop: next returns a channel closed when the
// round running now ends.
type beat struct {
	mu sync.Mutex
	c  chan struct{}
}

func newBeat() *beat { return &beat{c: make(chan struct{})} }

func (b *beat) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c
}

func (b *beat) tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.c)
	b.c = make(chan struct{})
}
