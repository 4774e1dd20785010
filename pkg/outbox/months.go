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

// outbox_event by month
//
// outbox_event is partitioned by the month of its event id (migration 0002):
// an append goes to the month its UUIDv7 id was minted in, and the relay's
// claim reads each month's pending index in id order. The relay's upkeep
// (each PurgeInterval) creates the partitions of the current month and the
// next ones ahead, drops a month once it ended more than the retention ago
// and every row in it was published more than the retention ago, and
// deletes published rows of the default partition (the table as it was
// before, ids outside every month) in batches. A month holding a pending row
// or a dead letter is kept whole, published rows included, until the relay
// publishes it or an operator redrives the dead letter: DropMonths reports
// it as held, and the relay warns of it at each purge.

// EventMonths is outbox_event as a table partitioned by month.
var EventMonths = monthpart.Table{Name: "outbox_event", Key: "event_id", DDL: "outbox_event_months"}

// MonthsAhead is how many months after the current one EnsureMonths creates.
const MonthsAhead = 2

// EnsureMonths creates the partitions of outbox_event for the current month
// and the MonthsAhead after it that do not exist yet; it returns their names.
func EnsureMonths(ctx context.Context, pool *pgxpool.Pool, now time.Time) ([]string, error) {
	return EventMonths.Ensure(ctx, pool, now, MonthsAhead)
}

// Dropped is what DropMonths did.
type Dropped struct {
	Months []string // partitions dropped
	Rows   int64    // rows they held
	Held   []string // partitions past the retention kept for a pending row or a dead letter
}

// DropMonths drops each month partition of outbox_event that ended more than
// retention before now and whose rows were all published more than
// retention before now. A month holding a pending row or a dead letter is
// kept (Held).
func DropMonths(ctx context.Context, pool *pgxpool.Pool, now time.Time, retention time.Duration) (Dropped, error) {
	var d Dropped
	olderThan := now.Add(-retention)
	months, err := EventMonths.Months(ctx, pool)
	if err != nil {
		return d, err
	}
	for _, m := range months {
		if m.To.After(olderThan) {
			break
		}
		n, state, err := dropMonth(ctx, pool, m, olderThan)
		if err != nil {
			return d, fmt.Errorf("drop outbox month %s: %w", m.Name, err)
		}
		switch state {
		case monthDropped:
			d.Months = append(d.Months, m.Name)
			d.Rows += n
		case monthHeld:
			d.Held = append(d.Held, m.Name)
		}
	}
	return d, nil
}

type monthState int

const (
	monthDropped monthState = iota
	monthHeld               // a pending row or a dead letter
	monthRecent             // a row published within the retention
)

var errKeep = errors.New("month still in use")

func dropMonth(ctx context.Context, pool *pgxpool.Pool, m monthpart.Month, olderThan time.Time) (int64, monthState, error) {
	part := pgx.Identifier{m.Name}.Sanitize()
	// What keeps a month, read through its partial indexes: first without
	// the strong lock (a held month takes none), then again under it.
	check := `SELECT EXISTS (SELECT 1 FROM ` + part + ` WHERE published_at IS NULL AND dead_at IS NULL)
	              OR EXISTS (SELECT 1 FROM ` + part + ` WHERE dead_at IS NOT NULL),
	          EXISTS (SELECT 1 FROM ` + part + ` WHERE published_at >= $1)`
	var held, recent bool
	if err := pool.QueryRow(ctx, check, olderThan).Scan(&held, &recent); err != nil {
		return 0, 0, err
	}
	if held {
		return 0, monthHeld, nil
	}
	if recent {
		return 0, monthRecent, nil
	}
	var n int64
	state := monthDropped
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+part).Scan(&n); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		if err := EventMonths.Exec(ctx, tx, "detach", m); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, check, olderThan).Scan(&held, &recent); err != nil {
			return err
		}
		if held || recent { // redriven or marked since the first look
			state = monthHeld
			if !held {
				state = monthRecent
			}
			return errKeep
		}
		return EventMonths.Exec(ctx, tx, "drop", m)
	})
	if errors.Is(err, errKeep) {
		return 0, state, nil
	}
	return n, state, err
}
