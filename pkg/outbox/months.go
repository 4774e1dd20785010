package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart"
)

// outbox_event by day
//
// outbox_event is partitioned by the day of its event id (migration 0002
// made it partitioned, by month; days since monthpart's migration 0002): an
// append goes to the day its UUIDv7 id was minted in, and the relay's claim
// reads each day's pending index in id order. A published row is kept
// RELAY_RETENTION (a day), so a table kept by month held up to a month of
// rows for a day's retention; by day it holds the retention and the day
// being filled. The relay's upkeep (each PurgeInterval) creates the
// partitions of the current day and the next ones ahead, drops a day once
// it ended more than the retention ago and every row in it was published
// more than the retention ago, and deletes published rows of the default
// partition (the table as it was before, ids outside every day) in batches.
// A month partition made before the days is dropped by the same rule. A day
// holding a pending row or a dead letter is kept whole, published rows
// included, until the relay publishes it or an operator redrives the dead
// letter: DropParts reports it as held, and the relay warns of it at each
// purge.

// EventParts is outbox_event as a table partitioned by day, two days
// created ahead.
var EventParts = monthpart.Table{Name: "outbox_event", Key: "event_id", DDL: "outbox_event_months", Span: monthpart.Day, Ahead: 2}

// EnsureParts creates the partitions of outbox_event for the current day and
// the days ahead that do not exist yet; it returns their names.
func EnsureParts(ctx context.Context, pool *pgxpool.Pool, now time.Time) ([]string, error) {
	return EventParts.Ensure(ctx, pool, now)
}

// Dropped is what DropParts did.
type Dropped struct {
	Parts []string // partitions dropped
	Rows  int64    // rows they held
	Held  []string // partitions past the retention kept for a pending row or a dead letter
}

// DropParts drops each partition of outbox_event that ended more than
// retention before now and whose rows were all published more than
// retention before now. A partition holding a pending row or a dead letter
// is kept (Held).
func DropParts(ctx context.Context, pool *pgxpool.Pool, now time.Time, retention time.Duration) (Dropped, error) {
	var d Dropped
	olderThan := now.Add(-retention)
	parts, err := EventParts.Parts(ctx, pool)
	if err != nil {
		return d, err
	}
	for _, p := range parts {
		if p.To.After(olderThan) {
			break
		}
		n, state, err := dropPart(ctx, pool, p, olderThan)
		if err != nil {
			return d, fmt.Errorf("drop outbox partition %s: %w", p.Name, err)
		}
		switch state {
		case partDropped:
			d.Parts = append(d.Parts, p.Name)
			d.Rows += n
		case partHeld:
			d.Held = append(d.Held, p.Name)
		}
	}
	return d, nil
}

type partState int

const (
	partDropped partState = iota
	partHeld              // a pending row or a dead letter
	partRecent            // a row published within the retention
)

var errKeep = errors.New("partition still in use")

// dropCheck is dropPart's statement on the partition part: whether it holds
// a pending row or a dead letter, and whether it holds a row published at
// or after $1. Each reads the first row in the order of the partial index
// that holds it, so that the index is the plan. As EXISTS (which drops the
// order) a day all published was read whole by a Seq Scan: for its dead
// letters and its recent rows when it was never analyzed, for its pending
// rows when it was analyzed while they were pending
// (TestDropCheckReadsNoPublishedRow).
func dropCheck(part string) string {
	return `SELECT (SELECT id FROM ` + part + ` WHERE published_at IS NULL AND dead_at IS NULL ORDER BY shard, id LIMIT 1) IS NOT NULL
	              OR (SELECT id FROM ` + part + ` WHERE dead_at IS NOT NULL ORDER BY id LIMIT 1) IS NOT NULL,
	          (SELECT published_at FROM ` + part + ` WHERE published_at >= $1 ORDER BY published_at LIMIT 1) IS NOT NULL`
}

func dropPart(ctx context.Context, pool *pgxpool.Pool, m monthpart.Part, olderThan time.Time) (int64, partState, error) {
	part := pgx.Identifier{m.Name}.Sanitize()
	// What keeps a partition, read through its partial indexes: first
	// without the strong lock (a held one takes none), then again under it.
	check := dropCheck(part)
	var held, recent bool
	if err := pool.QueryRow(ctx, check, olderThan).Scan(&held, &recent); err != nil {
		return 0, 0, err
	}
	if held {
		return 0, partHeld, nil
	}
	if recent {
		return 0, partRecent, nil
	}
	var n int64
	state := partDropped
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+part).Scan(&n); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		if err := EventParts.Exec(ctx, tx, "detach", m); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, check, olderThan).Scan(&held, &recent); err != nil {
			return err
		}
		if held || recent { // redriven or marked since the first look
			state = partHeld
			if !held {
				state = partRecent
			}
			return errKeep
		}
		return EventParts.Exec(ctx, tx, "drop", m)
	})
	if errors.Is(err, errKeep) {
		return 0, state, nil
	}
	return n, state, err
}
