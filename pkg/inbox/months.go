package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart"
)

// inbox_event by week
//
// inbox_event is partitioned by the week of its event id (migration 0005 made
// it partitioned, by month; weeks since monthpart's migration 0002). The
// primary key is the event id, global across weeks, so a redelivery is a
// DUPLICATE however late it comes: its id leads to its own week. The
// aggregate slot is unique within each week (created with each week's
// partition); across weeks, the claim's step reads the holder of each
// event's slot (see read in decide.go) and an event whose slot another event
// holds is a DUPLICATE (ReasonVersionApplied), as when the unique slot
// refused its claim.
//
// Retention drops a week (DropParts) once it ended more than the retention
// (INBOX_RETENTION, two weeks) ago and nothing in it was decided since: a
// table kept by month held up to six weeks of rows for two weeks'
// retention, by week it holds at most three. Weeks, not days: the slot
// holder's lookup probes every partition, so the partitions are kept few (at
// two weeks' retention: three past weeks, the current one, one ahead and the
// default). The newest version of each aggregate of a keepNewest type in a
// dropped week, which no later version follows, is carried into the DEFAULT
// partition first, as the row purge keeps it. The default (the table as it
// was before partitioning, ids outside every partition, carried rows) is
// purged row by row (PurgeDefault). A month partition made before the weeks
// is dropped by the same rule; the rest of the week it ends in gets a
// partition of its own, from its first day.

// EventParts is inbox_event as a table partitioned by week, one week created
// ahead. Each partition gets its own unique aggregate slot (the function
// inbox_event_months of migration 0005 creates it).
var EventParts = monthpart.Table{Name: "inbox_event", Key: "event_id", DDL: "inbox_event_months", Span: monthpart.Week, Ahead: 1}

// MintSkew is how far apart the clocks that mint a minted aggregate's id
// and its events' ids may be (Options.MintedAggregates): a holder of the
// aggregate's slot is looked for from the id's time less MintSkew. A day,
// where the clocks of a producer's instances differ by milliseconds: an
// event of the first day of a week still looks in the week before.
const MintSkew = 24 * time.Hour

// HolderSince is the least event id an event holding the slot of aggregate
// id can have: for a minted aggregate whose id is a UUIDv7, the id's time
// less MintSkew; for any other, the nil UUID (every id).
func HolderSince(aggregateID string, minted bool) uuid.UUID {
	if !minted {
		return uuid.Nil
	}
	id, err := uuid.Parse(aggregateID)
	if err != nil || id.Version() != 7 {
		return uuid.Nil
	}
	since := monthpart.TimeOf(id).Add(-MintSkew)
	if since.Before(time.UnixMilli(0)) {
		return uuid.Nil
	}
	return monthpart.Bound(since)
}

// EnsureParts creates the partitions of inbox_event for the current week
// and the week ahead that do not exist yet; it returns their names.
func EnsureParts(ctx context.Context, pool *pgxpool.Pool, now time.Time) ([]string, error) {
	return EventParts.Ensure(ctx, pool, now)
}

// DropParts drops each partition of inbox_event that ended before
// olderThan and holds nothing decided since olderThan, after carrying the
// newest version of each aggregate of a keepNewest type in it that no later
// version follows into the default partition. It returns the partitions
// dropped and the rows they held (carried rows included).
func DropParts(ctx context.Context, pool *pgxpool.Pool, olderThan time.Time, keepNewest []string) ([]string, int64, error) {
	if keepNewest == nil {
		keepNewest = []string{}
	}
	parts, err := EventParts.Parts(ctx, pool)
	if err != nil {
		return nil, 0, err
	}
	var dropped []string
	var total int64
	for _, p := range parts {
		if p.To.After(olderThan) {
			break
		}
		n, ok, err := dropPart(ctx, pool, p, olderThan, keepNewest)
		if err != nil {
			return dropped, total, fmt.Errorf("drop inbox partition %s: %w", p.Name, err)
		}
		if ok {
			dropped = append(dropped, p.Name)
			total += n
		}
	}
	return dropped, total, nil
}

func dropPart(ctx context.Context, pool *pgxpool.Pool, m monthpart.Part, olderThan time.Time, keepNewest []string) (int64, bool, error) {
	part := pgx.Identifier{m.Name}.Sanitize()
	var n int64
	dropped := false
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Count and choose the rows to carry before the strong lock (reads
		// under it would stall every claim). The check under the lock below
		// proves nothing was decided in the partition since: the choice still
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
		if err := EventParts.Exec(ctx, tx, "detach", m); err != nil {
			return err
		}
		var fresh bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+part+` WHERE applied_at >= $1)`, olderThan).Scan(&fresh); err != nil {
			return err
		}
		if fresh { // decided late (a redrive, a long deferral): the partition waits
			return errKeep
		}
		// The partition's range is gone: the carried rows go to the default.
		if _, err := tx.Exec(ctx, `INSERT INTO inbox_event SELECT * FROM inbox_carry ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		if err := EventParts.Exec(ctx, tx, "drop", m); err != nil {
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

// errKeep rolls back the drop of a partition that must wait.
var errKeep = errors.New("partition still in use")
