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
// append goes to the day its UUIDv7 id was minted in. A sent row is kept
// RELAY_RETENTION (a day) from its creation, so a table kept by month held up
// to a month of rows for a day's retention; by day it holds the retention and
// the day being filled. The relay's upkeep (each PurgeInterval) creates the
// partitions of the current day and the next ones ahead, drops a day once it
// ended more than the retention ago and none of its rows is pending (listed
// in outbox_pending) or a dead letter, and deletes sent rows of the default
// partition (the table as it was before, ids outside every day) in batches.
// A month partition made before the days is dropped by the same rule. A day
// holding a pending row or a dead letter is kept whole, sent rows included,
// until the relay sends it or an operator redrives the dead letter:
// DropParts reports it as held, and the relay warns of it at each purge.

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
// retention before now and holds no pending row and no dead letter. A
// partition holding one is kept (Held).
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
		n, dropped, err := dropPart(ctx, pool, p)
		if err != nil {
			return d, fmt.Errorf("drop outbox partition %s: %w", p.Name, err)
		}
		if dropped {
			d.Parts = append(d.Parts, p.Name)
			d.Rows += n
		} else {
			d.Held = append(d.Held, p.Name)
		}
	}
	return d, nil
}

var errKeep = errors.New("partition still in use")

// dropCheck is dropPart's statement on the partition part, whose ids are
// [$1, $2): whether a pending entry names one of its rows (outbox_pending
// is the backlog, read whole at worst), or it holds a dead letter, read as
// the first row in the order of the partial index that holds them, so that
// the index is the plan: as EXISTS (which drops the order) a day never
// analyzed was read whole by a Seq Scan (TestDropCheckReadsNoPublishedRow).
func dropCheck(part string) string {
	return `SELECT EXISTS (SELECT 1 FROM outbox_pending WHERE event_id >= $1 AND event_id < $2)
	              OR (SELECT id FROM ` + part + ` WHERE dead_at IS NOT NULL ORDER BY id LIMIT 1) IS NOT NULL`
}

func dropPart(ctx context.Context, pool *pgxpool.Pool, m monthpart.Part) (int64, bool, error) {
	part := pgx.Identifier{m.Name}.Sanitize()
	lo, hi := monthpart.Bound(m.From), monthpart.Bound(m.To)
	// What keeps a partition: first without the strong lock (a held one
	// takes none), then again under it.
	check := dropCheck(part)
	var held bool
	if err := pool.QueryRow(ctx, check, lo, hi).Scan(&held); err != nil {
		return 0, false, err
	}
	if held {
		return 0, false, nil
	}
	var n int64
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
		if err := tx.QueryRow(ctx, check, lo, hi).Scan(&held); err != nil {
			return err
		}
		if held { // redriven since the first look
			return errKeep
		}
		return EventParts.Exec(ctx, tx, "drop", m)
	})
	if errors.Is(err, errKeep) {
		return 0, false, nil
	}
	return n, err == nil, err
}
