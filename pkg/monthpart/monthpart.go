// Package monthpart keeps a table partitioned by month of its UUIDv7 key:
// PARTITION BY RANGE on the key, one partition <table>_pYYYYMM per month
// whose bounds are the first UUIDv7 values of the month and of the next, and
// a DEFAULT partition <table>_default for every key outside them (the rows a
// table had before it was partitioned, keys that are not UUIDv7 values, rows
// carried over from a dropped month). A UUIDv7 starts with its Unix time in
// milliseconds, big-endian, so the ids of one month sort between the bounds
// and the primary key on the id alone stays a valid partitioned key.
package monthpart

import (
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the month upkeep's DDL every partitioned table's own
// function calls (monthpart_ddl), tracked in monthpart_schema_migrations. A
// set whose migrations define a table's DDL function lists it in its Needs.
var Migrations = pgmigrate.Set{FS: migrationFiles, Dir: "migrations", Table: "monthpart_schema_migrations"}

// Bound is the smallest UUIDv7 value of time t's millisecond: its 48-bit
// Unix time in milliseconds, then zeros.
func Bound(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	return u
}

// Start is the first instant of t's month, UTC.
func Start(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Month is one month partition.
type Month struct {
	Name string    // <table>_pYYYYMM
	From time.Time // first instant of the month, UTC
	To   time.Time // first instant of the next month
}

// MonthOf returns table's partition for the month of t.
func MonthOf(table string, t time.Time) Month {
	from := Start(t)
	return Month{Name: fmt.Sprintf("%s_p%04d%02d", table, from.Year(), from.Month()), From: from, To: from.AddDate(0, 1, 0)}
}

// Table is a table partitioned by month of its UUIDv7 column Key.
type Table struct {
	Name string
	Key  string
	// DDL is the SECURITY DEFINER function the table's migration created
	// for the upkeep's DDL, <table>_months(op, month, lo, hi), one call of
	// Migrations' monthpart_ddl with the table's name and key: the service
	// runs as a role that owns no table, so it creates, detaches and drops
	// partitions, and adds, validates and drops the default's month CHECK,
	// through it (ops "create", "detach", "drop", "add_check",
	// "validate_check", "drop_check"; month as YYYYMM).
	DDL string
}

// Exec runs op of the table's DDL function on month m through q.
func (tb Table) Exec(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, op string, m Month) error {
	_, err := q.Exec(ctx, `SELECT `+pgx.Identifier{tb.DDL}.Sanitize()+`($1, $2, $3, $4)`,
		op, m.From.Format("200601"), Bound(m.From), Bound(m.To))
	return err
}

// Default is the name of the table's DEFAULT partition.
func (tb Table) Default() string { return tb.Name + "_default" }

// Months lists the table's month partitions, oldest first.
func (tb Table) Months(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]Month, error) {
	rows, err := q.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname ~ ('^' || $2 || '_p[0-9]{6}$')`, tb.Name, tb.Name)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", tb.Name, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", tb.Name, err)
	}
	slices.Sort(names)
	out := make([]Month, 0, len(names))
	for _, n := range names {
		t, err := time.Parse("200601", n[len(n)-6:])
		if err != nil {
			return nil, fmt.Errorf("partition %s: %w", n, err)
		}
		out = append(out, MonthOf(tb.Name, t))
	}
	return out, nil
}

// lockTimeout bounds how long upkeep waits for the strong lock that creating,
// attaching or dropping a partition takes on the parent: behind a long
// transaction it gives up (and tries again at the next interval) rather than
// queue every insert behind it.
const lockTimeout = "5s"

// Ensure creates the partitions of the months of now and of the ahead months
// after it that do not exist yet, and returns the names it created. Creating
// a partition beside a DEFAULT partition would scan the default under an
// ACCESS EXCLUSIVE lock to prove it holds no row of the new month; a CHECK
// constraint excluding the month, added NOT VALID and validated under a lock
// that lets writes through, proves it instead, and is dropped with the
// partition's creation. A month that has begun and whose rows the default
// holds (after the migration, the month then current) is left to the
// default: moving its rows would hold the strong lock while they are copied.
// A month to come whose ids the default holds (ids minted with a clock ahead,
// or not UUIDv7 values) is moved in one transaction: its few rows leave the
// default and enter the new partition, under the strong lock. A month that
// has begun and that the default holds nothing of (a new database) is
// created at once: no CHECK may refuse the rows that come meanwhile.
//
// Replicas of a service run it at once: the one holding a session advisory
// lock on the table's name does the work, the others return at once.
func (tb Table) Ensure(ctx context.Context, pool *pgxpool.Pool, now time.Time, ahead int) ([]string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	var mine bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('monthpart.' || $1, 0))`, tb.Name).Scan(&mine); err != nil {
		return nil, fmt.Errorf("lock the months of %s: %w", tb.Name, err)
	}
	if !mine {
		return nil, nil
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended('monthpart.' || $1, 0))`, tb.Name)
	}()
	have, err := tb.Months(ctx, conn)
	if err != nil {
		return nil, err
	}
	var created []string
	for i := 0; i <= ahead; i++ {
		m := MonthOf(tb.Name, Start(now).AddDate(0, i, 0))
		if slices.ContainsFunc(have, func(h Month) bool { return h.Name == m.Name }) {
			continue
		}
		ok, err := tb.create(ctx, conn.Conn(), m, m.From.After(now))
		if err != nil {
			return created, fmt.Errorf("create partition %s: %w", m.Name, err)
		}
		if ok {
			created = append(created, m.Name)
		}
	}
	return created, nil
}

// create creates m's partition unless the default holds rows of m and
// mayMove is false; it reports whether it created it. Every statement that
// takes a strong lock runs in a transaction of its own with a local
// lock_timeout, so the connection goes back to the pool as it came.
func (tb Table) create(ctx context.Context, conn *pgx.Conn, m Month, mayMove bool) (bool, error) {
	lo, hi := Bound(m.From), Bound(m.To)
	def := pgx.Identifier{tb.Default()}.Sanitize()
	key := pgx.Identifier{tb.Key}.Sanitize()
	locked := func(steps ...func(pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+lockTimeout+`'`); err != nil {
				return err
			}
			for _, step := range steps {
				if err := step(tx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	sql := func(q string, args ...any) func(pgx.Tx) error {
		return func(tx pgx.Tx) error { _, err := tx.Exec(ctx, q, args...); return err }
	}
	ddl := func(op string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error { return tb.Exec(ctx, tx, op, m) }
	}
	// A look through the default's primary key first, under no lock that
	// stops writes: a month that has begun in the default is left there.
	var inDefault bool
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s >= $1 AND %s < $2)`, def, key, key),
		lo, hi).Scan(&inDefault); err != nil {
		return false, err
	}
	switch {
	case inDefault && !mayMove:
		return false, nil
	case inDefault: // a month to come: its few rows move with the creation
		err := locked(
			sql(fmt.Sprintf(`CREATE TEMP TABLE monthpart_moving ON COMMIT DROP AS SELECT * FROM %s WHERE %s >= $1 AND %s < $2`, def, key, key), lo, hi),
			sql(fmt.Sprintf(`DELETE FROM %s WHERE %s >= $1 AND %s < $2`, def, key, key), lo, hi),
			ddl("create"),
			sql(fmt.Sprintf(`INSERT INTO %s OVERRIDING SYSTEM VALUE SELECT * FROM monthpart_moving`, pgx.Identifier{tb.Name}.Sanitize())))
		return err == nil, err
	case !mayMove:
		// A month that has begun (a new database, or upkeep down for
		// months): rows of it may come at any moment, so no CHECK may refuse
		// them; the creation scans the default, which holds none of it.
		err := locked(ddl("create"))
		return err == nil, err
	}
	// A month to come, none of it in the default: a CHECK excluding it,
	// added NOT VALID and validated under a lock that lets writes through,
	// spares the creation its scan of the default.
	if err := locked(ddl("add_check")); err != nil {
		return false, err
	}
	if err := tb.Exec(ctx, conn, "validate_check", m); err != nil {
		// A row of the month came meanwhile: the next interval moves it.
		return false, errors.Join(err, locked(ddl("drop_check")))
	}
	err := locked(ddl("create"), ddl("drop_check"))
	return err == nil, err
}
