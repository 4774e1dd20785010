package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart"
)

// inbox_event by month
//
// inbox_event is partitioned by the month of its event id (migration 0005).
// The primary key is the event id, global across months, so a redelivery is
// a DUPLICATE however late it comes: its id leads to its own month. The
// aggregate slot is unique within each month (created with each month's partition); across
// months, the claim's step reads the holder of each event's slot (see read in
// decide.go) and an event whose slot another event holds is a DUPLICATE
// (ReasonVersionApplied), as when the unique slot refused its claim.
//
// Retention drops a month (DropMonths) once the month ended more than the
// retention ago and nothing in it was decided since; the newest version of
// each aggregate of a keepNewest type in it, which no later version follows,
// is carried into the DEFAULT partition first, as the row purge keeps it.
// The default (the table as it was before partitioning, ids outside every
// month, carried rows) is purged row by row (PurgeDefault).

// EventMonths is inbox_event as a table partitioned by month.
// Each month partition gets its own unique aggregate slot (the function
// inbox_event_months of migration 0005 creates it).
var EventMonths = monthpart.Table{Name: "inbox_event", Key: "event_id", DDL: "inbox_event_months"}

// MonthsAhead is how many months after the current one EnsureMonths creates,
// so that no insert ever finds its month missing while the upkeep is down for
// a while: rows of a month with no partition go to the default, which is
// correct but purged row by row.
const MonthsAhead = 2

// EnsureMonths creates the partitions of inbox_event for the current month
// and the MonthsAhead after it that do not exist yet; it returns their names.
func EnsureMonths(ctx context.Context, pool *pgxpool.Pool, now time.Time) ([]string, error) {
	return EventMonths.Ensure(ctx, pool, now, MonthsAhead)
}

// DropMonths drops each month partition of inbox_event that ended before
// olderThan and holds nothing decided since olderThan, after carrying the
// newest version of each aggregate of a keepNewest type in it that no later
// version follows into the default partition. It returns the partitions
// dropped and the rows they held (carried rows included).
func DropMonths(ctx context.Context, pool *pgxpool.Pool, olderThan time.Time, keepNewest []string) ([]string, int64, error) {
	if keepNewest == nil {
		keepNewest = []string{}
	}
	months, err := EventMonths.Months(ctx, pool)
	if err != nil {
		return nil, 0, err
	}
	var dropped []string
	var total int64
	for _, m := range months {
		if m.To.After(olderThan) {
			break
		}
		n, ok, err := dropMonth(ctx, pool, m, olderThan, keepNewest)
		if err != nil {
			return dropped, total, fmt.Errorf("drop inbox month %s: %w", m.Name, err)
		}
		if ok {
			dropped = append(dropped, m.Name)
			total += n
		}
	}
	return dropped, total, nil
}

func dropMonth(ctx context.Context, pool *pgxpool.Pool, m monthpart.Month, olderThan time.Time, keepNewest []string) (int64, bool, error) {
	part := pgx.Identifier{m.Name}.Sanitize()
	var n int64
	dropped := false
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Count and choose the rows to carry before the strong lock (reads
		// under it would stall every claim). The check under the lock below
		// proves nothing was decided in the month since: the choice still
		// holds (a later version decided elsewhere meanwhile only makes a
		// carried row one more the row purge removes).
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+part).Scan(&n); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			CREATE TEMP TABLE inbox_carry ON COMMIT DROP AS
			SELECT * FROM `+part+` e
			WHERE e.aggregate_type = ANY($1::text[]) AND NOT EXISTS (
			    SELECT 1 FROM inbox_event n
			    WHERE n.tenant_id = e.tenant_id AND n.aggregate_type = e.aggregate_type
			      AND n.aggregate_id = e.aggregate_id AND n.aggregate_version > e.aggregate_version)`, keepNewest); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		if err := EventMonths.Exec(ctx, tx, "detach", m); err != nil {
			return err
		}
		var fresh bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+part+` WHERE applied_at >= $1)`, olderThan).Scan(&fresh); err != nil {
			return err
		}
		if fresh { // decided late (a redrive, a long deferral): the month waits
			return errKeep
		}
		// The month's range is gone: the carried rows go to the default.
		if _, err := tx.Exec(ctx, `INSERT INTO inbox_event SELECT * FROM inbox_carry ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		if err := EventMonths.Exec(ctx, tx, "drop", m); err != nil {
			return err
		}
		dropped = true
		return nil
	})
	if errors.Is(err, errKeep) {
		return 0, false, nil
	}
	return n, dropped, err
}

// errKeep rolls back the drop of a month that must wait.
var errKeep = errors.New("month still in use")
