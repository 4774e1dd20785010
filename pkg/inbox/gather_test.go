package inbox

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// A lone message is decided once loneWait passes, not with one sent a
// second later (MaxWait is three); a burst waits for the rest of itself,
// well past loneWait, up to BatchSize.
func TestGatherDecidesALoneMessageAtOnceAndWaitsForABurst(t *testing.T) {
	r := &Runner{cfg: RunnerConfig{BatchSize: 3, MaxWait: 3 * time.Second}}
	ctx := t.Context()
	linger := time.NewTimer(time.Hour)
	msg := func(offset int64) *sarama.ConsumerMessage { return &sarama.ConsumerMessage{Offset: offset} }

	in := make(chan *sarama.ConsumerMessage, 3)
	in <- msg(1)
	next := time.AfterFunc(time.Second, func() { in <- msg(2) })
	batch, ok := r.gather(ctx, in, nil, linger)
	if !ok || len(batch) != 1 || batch[0].Offset != 1 {
		t.Fatalf("a lone message: got %d messages (ok %v), want it alone", len(batch), ok)
	}
	if !next.Stop() {
		<-in // the machine stalled for a second: the next message came anyway
	}

	in <- msg(2)
	in <- msg(3)
	late := time.AfterFunc(20*loneWait, func() { in <- msg(4) })
	defer late.Stop()
	batch, ok = r.gather(ctx, in, batch[:0], linger)
	if !ok || len(batch) != 3 || batch[2].Offset != 4 {
		t.Fatalf("a burst: got %d messages (ok %v), want 3 with the one sent %s after it", len(batch), ok, 20*loneWait)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := r.gather(cancelled, in, batch[:0], linger); ok {
		t.Fatal("gather returned a batch after its context ended")
	}
}
