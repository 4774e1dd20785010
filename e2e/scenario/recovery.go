package scenario

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
)

// Recovery is a service's backlog: what the operator API will show (a
// later issue); read here from the service's own database.
type Recovery struct {
	OutboxPending int64 // outbox rows not yet published
	DeadLetters   int64 // outbox rows that exhausted their attempts
	Deferred      int64 // inbox events waiting for a predecessor or a fact
	Quarantined   int64 // inbox events set aside, not redriven
}

// Zero reports whether nothing is pending, dead, deferred or quarantined.
func (r Recovery) Zero() bool { return r == Recovery{} }

func (r Recovery) String() string {
	return fmt.Sprintf("outbox pending %d, dead letters %d, deferred %d, quarantined %d",
		r.OutboxPending, r.DeadLetters, r.Deferred, r.Quarantined)
}

// ReadRecovery reads one service's backlog from its database (outbox
// ReadStats, inbox Stats).
func ReadRecovery(ctx context.Context, databaseURL string) (Recovery, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return Recovery{}, fmt.Errorf("read recovery status: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ob, err := outbox.ReadStats(ctx, conn)
	if err != nil {
		return Recovery{}, err
	}
	// Stats needs an Inbox only for its method; no handler, no metrics.
	ib, err := inbox.New(envelope.NewRegistry(), nil, inbox.Options{Service: "scenario"})
	if err != nil {
		return Recovery{}, err
	}
	in, err := ib.Stats(ctx, conn)
	if err != nil {
		return Recovery{}, err
	}
	return Recovery{OutboxPending: ob.Pending, DeadLetters: ob.DeadLetters, Deferred: in.Deferred, Quarantined: in.Quarantined}, nil
}

// WaitRecovered reads every service's backlog (databaseURLs: service name
// -> database URL) until all are zero or wait has passed, and returns the
// last reading. A backlog that is not zero by then is not an error here:
// the caller judges it.
func WaitRecovered(ctx context.Context, databaseURLs map[string]string, wait time.Duration, progress func(string, ...any)) (map[string]Recovery, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	deadline := time.Now().Add(wait)
	lastReport := time.Now()
	for {
		out := map[string]Recovery{}
		var busy []string
		for _, name := range slices.Sorted(maps.Keys(databaseURLs)) {
			r, err := ReadRecovery(ctx, databaseURLs[name])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out[name] = r
			if !r.Zero() {
				busy = append(busy, name+": "+r.String())
			}
		}
		if len(busy) == 0 || time.Now().After(deadline) {
			return out, nil
		}
		if time.Since(lastReport) >= 2*time.Second {
			progress("waiting for the backlogs to drain: %s", strings.Join(busy, "; "))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
