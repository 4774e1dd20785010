package soak

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// chargedWindow bounds the ids one poll of waitCharged asks billing about.
const chargedWindow = 10_000

// waitCharged waits until billing has charged every fact of ids (usage
// event ids, oldest first), polling every poll until timeout, and returns
// how many are left uncharged (0 on success). Each poll asks about the
// oldest window of at most chargedWindow ids not yet seen charged, moves
// past those charged and, while a whole window is charged, asks about the
// next at once: the wait reads each id about once however long it lasts,
// and a poll at most a window. It replaces counts over the charge table at
// each poll that read every charge of the run (millions by the hour's end):
// four tenants' every 200 ms while a scheduled close waited, and, every
// second for each fault recovering, a lookup by usage event id that charge,
// partitioned by month, has no index for. The harness's own queries took
// more of PostgreSQL's CPU than billing's (676 s against 50 s half an hour
// into the third hour) just when billing had to catch up. status, when
// set, is told after each poll how many of the ids are charged.
func waitCharged(ctx context.Context, billing *pgxpool.Pool, ids []string, timeout, poll time.Duration, status func(charged, of int)) (int, error) {
	deadline := time.Now().Add(timeout)
	var front []string // ids asked about and not charged yet, oldest first; never more than a window
	next := 0          // ids[next:] not asked about yet
	left := func() int { return len(front) + len(ids) - next }
	for {
		for {
			batch := slices.Clone(front)
			take := min(chargedWindow-len(batch), len(ids)-next)
			batch = append(batch, ids[next:next+take]...)
			if len(batch) == 0 {
				return 0, nil
			}
			charged, err := chargedOf(ctx, billing, batch)
			if err != nil {
				return left(), err
			}
			front = slices.DeleteFunc(batch, func(id string) bool { return charged[id] })
			next += take
			if len(front) > 0 || next == len(ids) {
				break
			}
		}
		if status != nil {
			status(len(ids)-left(), len(ids))
		}
		if left() == 0 {
			return 0, nil
		}
		if time.Now().After(deadline) {
			return left(), fmt.Errorf("%d of %d facts charged within %s", len(ids)-left(), len(ids), timeout)
		}
		if !sleep(ctx, poll) {
			return left(), ctx.Err()
		}
	}
}

// chargedOf returns which of the usage event ids billing has charged: those
// with a charge_origin row, written with the charge in its statement and
// keyed by the usage event id (charge itself, partitioned by month, has no
// index on it: a lookup there reads every partition).
func chargedOf(ctx context.Context, billing *pgxpool.Pool, ids []string) (map[string]bool, error) {
	rows, err := billing.Query(ctx, `SELECT u FROM unnest($1::text[]) u WHERE EXISTS (
		SELECT 1 FROM charge_origin o WHERE o.usage_event_id = u::uuid)`, ids)
	if err != nil {
		return nil, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}
