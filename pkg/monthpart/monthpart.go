// Package monthpart keeps a table partitioned by time of its UUIDv7 key:
// PARTITION BY RANGE on the key, one partition per span of time (a month,
// <table>_pYYYYMM; a week or a day, <table>_pYYYYMMDD named by its first
// day) whose bounds are the first UUIDv7 values of the span and of the next,
// and a DEFAULT partition <table>_default for every key outside them (the
// rows a table had before it was partitioned, keys that are not UUIDv7
// values, rows carried over from a dropped span). A UUIDv7 starts with its
// Unix time in milliseconds, big-endian, so the ids of one span sort between
// the bounds and the primary key on the id alone stays a valid partitioned
// key. A table's span is chosen by how long its rows are kept: months for
// what is kept for months, days or weeks for what is kept for a day or two
// weeks, so that what the table holds past its retention is at most one
// span.
package monthpart

import (
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the upkeep's DDL every partitioned table's own function
// calls (monthpart_ddl), tracked in monthpart_schema_migrations. A set whose
// migrations define a table's DDL function lists it in its Needs.
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

// TimeOf is the instant, to the millisecond, of UUIDv7 id: its first 48 bits
// (of any id, the instant whose Bound is not above it).
func TimeOf(id uuid.UUID) time.Time {
	var ms [8]byte
	copy(ms[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:]))).UTC()
}

// Start is the first instant of t's month, UTC.
func Start(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Span is how much time one partition of a table holds.
type Span int

const (
	Month Span = iota // <table>_pYYYYMM
	Week              // <table>_pYYYYMMDD, Monday to Monday, UTC
	Day               // <table>_pYYYYMMDD
)

// Start is the first instant of t's span, UTC.
func (s Span) Start(t time.Time) time.Time {
	if s == Month {
		return Start(t)
	}
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	if s == Week {
		d = d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
	}
	return d
}

// Around returns the range [lo, hi) of ids about id that no partition of a
// table of span s cuts: from the later of the starts of id's span and month
// to the earlier of their ends. Every partition boundary is a start of a
// span or of a month (spans, months kept from before the span was finer, a
// span's rest after such a month), so the ids of the range are all in id's
// partition, or all in the default.
func (s Span) Around(id uuid.UUID) (lo, hi uuid.UUID) {
	t := TimeOf(id)
	from, to := s.Start(t), s.Add(s.Start(t), 1)
	if m := Start(t); m.After(from) {
		from = m
	}
	if m := Start(t).AddDate(0, 1, 0); m.Before(to) {
		to = m
	}
	return Bound(from), Bound(to)
}

// Add moves t by n spans.
func (s Span) Add(t time.Time, n int) time.Time {
	switch s {
	case Week:
		return t.AddDate(0, 0, 7*n)
	case Day:
		return t.AddDate(0, 0, n)
	}
	return t.AddDate(0, n, 0)
}

// Part is one partition: the ids minted from From to To.
type Part struct {
	Name string    // <table>_pYYYYMM (a month) or <table>_pYYYYMMDD (from a day)
	From time.Time // first instant, UTC
	To   time.Time // first instant after it
}

// MonthOf returns the month partition of table for the month of t.
func MonthOf(table string, t time.Time) Part {
	from := Start(t)
	return Part{Name: fmt.Sprintf("%s_p%04d%02d", table, from.Year(), from.Month()), From: from, To: from.AddDate(0, 1, 0)}
}

// PartOf returns the table's partition for the span of t.
func (tb Table) PartOf(t time.Time) Part {
	if tb.Span == Month {
		return MonthOf(tb.Name, t)
	}
	from := tb.Span.Start(t)
	return tb.from(from, tb.Span.Add(from, 1))
}

// from is the partition of the table from from to to, named by its day.
func (tb Table) from(from, to time.Time) Part {
	return Part{Name: tb.Name + "_p" + from.Format("20060102"), From: from, To: to}
}

// Table is a table partitioned by Span of its UUIDv7 column Key.
type Table struct {
	Name string
	Key  string
	Span Span
	// Ahead is how many spans after the current one Ensure creates, so that
	// no insert finds its span missing while the upkeep is down for a while
	// (rows of a span with no partition go to the default, which is correct
	// but purged row by row).
	Ahead int
	// DDL is the SECURITY DEFINER function the table's migration created
	// for the upkeep's DDL, <table>_months(op, part, lo, hi), one call of
	// Migrations' monthpart_ddl with the table's name and key: the service
	// runs as a role that owns no table, so it creates, detaches and drops
	// partitions, and adds, validates and drops the default's CHECK
	// excluding a partition's range, through it (ops "create", "detach",
	// "drop", "add_check", "validate_check", "drop_check"; part as the
	// partition's suffix, YYYYMM or YYYYMMDD).
	DDL string
}

// Exec runs op of the table's DDL function on partition p through q.
func (tb Table) Exec(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, op string, p Part) error {
	_, err := q.Exec(ctx, `SELECT `+pgx.Identifier{tb.DDL}.Sanitize()+`($1, $2, $3, $4)`,
		op, strings.TrimPrefix(p.Name, tb.Name+"_p"), Bound(p.From), Bound(p.To))
	return err
}

// Default is the name of the table's DEFAULT partition.
func (tb Table) Default() string { return tb.Name + "_default" }

// Parts lists the table's partitions other than the default, oldest first:
// those of its span, and months kept from before the table's span was finer
// than a month. A partition named by a day that is not the first of its span
// (the first after such a month) runs to the end of the span.
func (tb Table) Parts(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]Part, error) {
	rows, err := q.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname ~ ('^' || $2 || '_p([0-9]{6}|[0-9]{8})$')`, tb.Name, tb.Name)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", tb.Name, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", tb.Name, err)
	}
	out := make([]Part, 0, len(names))
	for _, n := range names {
		suffix := strings.TrimPrefix(n, tb.Name+"_p")
		if len(suffix) == 6 {
			t, err := time.Parse("200601", suffix)
			if err != nil {
				return nil, fmt.Errorf("partition %s: %w", n, err)
			}
			out = append(out, MonthOf(tb.Name, t))
			continue
		}
		t, err := time.Parse("20060102", suffix)
		if err != nil || tb.Span == Month {
			return nil, fmt.Errorf("partition %s: not a partition of %s's span (%v)", n, tb.Name, err)
		}
		out = append(out, tb.from(t, tb.Span.Add(tb.Span.Start(t), 1)))
	}
	slices.SortFunc(out, func(a, b Part) int { return a.From.Compare(b.From) })
	return out, nil
}

// lockTimeout bounds how long upkeep waits for the strong lock that creating,
// attaching or dropping a partition takes on the parent: behind a long
// transaction it gives up (and tries again at the next interval) rather than
// queue every insert behind it.
const lockTimeout = "5s"

// Ensure creates the partitions of the span of now and of the Ahead spans
// after it that do not exist yet, and returns the names it created. Creating
// a partition beside a DEFAULT partition would scan the default under an
// ACCESS EXCLUSIVE lock to prove it holds no row of the new span; a CHECK
// constraint excluding the span, added NOT VALID and validated under a lock
// that lets writes through, proves it instead, and is dropped with the
// partition's creation. A span that has begun and whose rows the default
// holds (after the migration, the span then current) is left to the
// default: moving its rows would hold the strong lock while they are copied.
// A span to come whose ids the default holds (ids minted with a clock ahead,
// or not UUIDv7 values) is moved in one transaction: its few rows leave the
// default and enter the new partition, under the strong lock. A span that
// has begun and that the default holds nothing of (a new database) is
// created at once: no CHECK may refuse the rows that come meanwhile. A
// partition that reaches into a span (a month's, kept from before the
// table's span was finer) leaves the span's rest to a partition from its
// end; a span it covers whole is not created.
//
// Replicas of a service run it at once: the one holding a session advisory
// lock on the table's name does the work, the others return at once.
func (tb Table) Ensure(ctx context.Context, pool *pgxpool.Pool, now time.Time) ([]string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	var mine bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('monthpart.' || $1, 0))`, tb.Name).Scan(&mine); err != nil {
		return nil, fmt.Errorf("lock the partitions of %s: %w", tb.Name, err)
	}
	if !mine {
		return nil, nil
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended('monthpart.' || $1, 0))`, tb.Name)
	}()
	have, err := tb.Parts(ctx, conn)
	if err != nil {
		return nil, err
	}
	var created []string
	for i := 0; i <= tb.Ahead; i++ {
		p := tb.PartOf(tb.Span.Add(tb.Span.Start(now), i))
		for _, h := range have {
			if !h.From.After(p.From) && h.To.After(p.From) {
				p = tb.from(h.To, p.To)
			}
		}
		if !p.From.Before(p.To) || slices.ContainsFunc(have, func(h Part) bool { return h.From.Before(p.To) && h.To.After(p.From) }) {
			continue
		}
		ok, err := tb.create(ctx, conn.Conn(), p, p.From.After(now))
		if err != nil {
			return created, fmt.Errorf("create partition %s: %w", p.Name, err)
		}
		if ok {
			created = append(created, p.Name)
			have = append(have, p)
		}
	}
	return created, nil
}

// create creates partition m unless the default holds rows of it and
// mayMove is false; it reports whether it created it. Every statement that
// takes a strong lock runs in a transaction of its own with a local
// lock_timeout, so the connection goes back to the pool as it came.
func (tb Table) create(ctx context.Context, conn *pgx.Conn, m Part, mayMove bool) (bool, error) {
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
	// stops writes: a span that has begun in the default is left there.
	var inDefault bool
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s >= $1 AND %s < $2)`, def, key, key),
		lo, hi).Scan(&inDefault); err != nil {
		return false, err
	}
	switch {
	case inDefault && !mayMove:
		return false, nil
	case inDefault: // a span to come: its few rows move with the creation
		err := locked(
			sql(fmt.Sprintf(`CREATE TEMP TABLE monthpart_moving ON COMMIT DROP AS SELECT * FROM %s WHERE %s >= $1 AND %s < $2`, def, key, key), lo, hi),
			sql(fmt.Sprintf(`DELETE FROM %s WHERE %s >= $1 AND %s < $2`, def, key, key), lo, hi),
			ddl("create"),
			sql(fmt.Sprintf(`INSERT INTO %s OVERRIDING SYSTEM VALUE SELECT * FROM monthpart_moving`, pgx.Identifier{tb.Name}.Sanitize())))
		return err == nil, err
	case !mayMove:
		// A span that has begun (a new database, or upkeep down for a
		// while): rows of it may come at any moment, so no CHECK may refuse
		// them; the creation scans the default, which holds none of it.
		err := locked(ddl("create"))
		return err == nil, err
	}
	// A span to come, none of it in the default: a CHECK excluding it,
	// added NOT VALID and validated under a lock that lets writes through,
	// spares the creation its scan of the default.
	if err := locked(ddl("add_check")); err != nil {
		return false, err
	}
	if err := tb.Exec(ctx, conn, "validate_check", m); err != nil {
		// A row of the span came meanwhile: the next interval moves it.
		return false, errors.Join(err, locked(ddl("drop_check")))
	}
	err := locked(ddl("create"), ddl("drop_check"))
	return err == nil, err
}
