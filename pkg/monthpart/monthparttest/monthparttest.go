// Package monthparttest holds what the tests and benchmarks of every table
// partitioned by month (pkg/monthpart) share: ids minted at a chosen time,
// a migration set cut before a version (the schema before the months), the
// partition a row is in, and the benchmark of a month's purge, row batches
// against a dropped month.
package monthparttest

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/pgmigrate"
)

// MintedAt returns a fresh UUIDv7 whose time is t (to the millisecond).
func MintedAt(t time.Time) uuid.UUID {
	id := uuid.Must(uuid.NewV7())
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// PartitionOf is the partition of tb holding the row whose key is id (""
// when there is none).
func PartitionOf(t testing.TB, pool *pgxpool.Pool, tb monthpart.Table, id uuid.UUID) string {
	t.Helper()
	var name string
	err := pool.QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM `+pgx.Identifier{tb.Name}.Sanitize()+
		` WHERE `+pgx.Identifier{tb.Key}.Sanitize()+` = $1`, id).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// Before returns set with only its migrations older than version: the
// schema as it was before that migration, to migrate a database from.
func Before(tb testing.TB, set pgmigrate.Set, version int) pgmigrate.Set {
	tb.Helper()
	files := fstest.MapFS{}
	if err := fs.WalkDir(set.FS, set.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if v, ok := versionOf(d.Name()); !ok || v >= version {
			return nil
		}
		b, err := fs.ReadFile(set.FS, p)
		files[p] = &fstest.MapFile{Data: b}
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return pgmigrate.Set{FS: files, Dir: set.Dir, Table: set.Table, Needs: set.Needs}
}

// versionOf reads the leading version number of a migration file's name.
func versionOf(name string) (int, bool) {
	i := 0
	for i < len(name) && name[i] >= '0' && name[i] <= '9' {
		i++
	}
	v, err := strconv.Atoi(name[:i])
	return v, err == nil
}

// Purge is one way a month's rows leave a table; it returns the rows removed.
type Purge func(b *testing.B, pool *pgxpool.Pool) int64

// PurgeBench describes BenchPurgeMonth's table.
type PurgeBench struct {
	Table monthpart.Table
	// NewPool returns a pool on a fresh, migrated database.
	NewPool func(b *testing.B) *pgxpool.Pool
	// Fill inserts rows rows of month, all past the retention (FillIDs and
	// FillFrom make their ids).
	Fill func(b *testing.B, pool *pgxpool.Pool, month time.Time, rows int)
	// Ways are the purges to compare, by name ("rows", "drop").
	Ways []Way
}

// Way is one named purge.
type Way struct {
	Name  string
	Purge Purge
}

// DeleteByKey is the way "rows" of a table with no purge of its own: the
// rows of the month *month names (set it in Fill) deleted in batches of
// 10,000 by key range, as a table without partitions would have to, each
// batch a transaction that first runs setup (such as SET LOCAL
// session_replication_role = replica, skipping an immutability trigger as
// only the owner could).
func DeleteByKey(tb monthpart.Table, month *time.Time, setup ...string) Way {
	return Way{Name: "rows", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
		lo, hi := monthpart.Bound(*month), monthpart.Bound(month.AddDate(0, 1, 0))
		table, key := pgx.Identifier{tb.Name}.Sanitize(), pgx.Identifier{tb.Key}.Sanitize()
		var total int64
		for {
			var n int64
			err := pgx.BeginFunc(b.Context(), pool, func(tx pgx.Tx) error {
				for _, sql := range setup {
					if _, err := tx.Exec(b.Context(), sql); err != nil {
						return err
					}
				}
				tag, err := tx.Exec(b.Context(), `DELETE FROM `+table+` WHERE `+key+` IN (
					SELECT `+key+` FROM `+table+` WHERE `+key+` >= $1 AND `+key+` < $2 LIMIT 10000)`, lo, hi)
				n = tag.RowsAffected()
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			total += n
			if n == 0 {
				return total
			}
		}
	}}
}

// ArchiveAndDrop is the way "drop" of a table its owner archives by month:
// archive(t timestamptz), the table's function that detaches the month of t
// and returns the partition's name, then DROP TABLE of it. It returns the
// rows dropped as the VACUUM before the purge counted them (a count of the
// month would be timed).
func ArchiveAndDrop(tb monthpart.Table, month *time.Time, archive string) Way {
	return Way{Name: "drop", Purge: func(b *testing.B, pool *pgxpool.Pool) int64 {
		ctx := b.Context()
		var n int64
		if err := pool.QueryRow(ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass`,
			monthpart.MonthOf(tb.Name, *month).Name).Scan(&n); err != nil {
			b.Fatal(err)
		}
		var name string
		if err := pool.QueryRow(ctx, `SELECT `+pgx.Identifier{archive}.Sanitize()+`($1)`, *month).Scan(&name); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize()); err != nil {
			b.Fatal(err)
		}
		return n
	}}
}

// FillIDs is a SQL expression of UUIDv7-shaped ids, one millisecond apart
// from $1::bigint (Unix milliseconds) for g of generate_series; use it in a
// FROM with "generate_series(1, n) g, LATERAL (SELECT lpad(to_hex($1::bigint
// + g), 12, '0') AS h) x".
const FillIDs = `(substr(h, 1, 8) || '-' || substr(h, 9, 4) || substr(gen_random_uuid()::text, 14))::uuid`

// FillFrom is the FROM clause FillIDs reads, for $1 the month's Unix
// milliseconds and n the row count's placeholder.
func FillFrom(n string) string {
	return `generate_series(1, ` + n + `::int) g, LATERAL (SELECT lpad(to_hex($1::bigint + g), 12, '0') AS h) x`
}

// BenchPurgeMonth compares the ways a month of rows past the retention
// leaves the table. PURGE_MONTH_ROWS rows (100,000 unless set) of one partition (a month, or the first day or week of it)
// three months ago are inserted, then purged; it reports the purge's seconds
// and WAL bytes per month (one month per iteration), and fails unless every
// row was purged.
func BenchPurgeMonth(b *testing.B, pb PurgeBench) {
	rows := 100_000
	if s := os.Getenv("PURGE_MONTH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		rows = n
	}
	// One partition of the table's span, from the first instant of the
	// month three months ago (the rows fill its first PURGE_MONTH_ROWS
	// milliseconds, within a day).
	month := monthpart.Start(time.Now()).AddDate(0, -3, 0)
	table := pb.Table
	table.Ahead = 0
	for _, w := range pb.Ways {
		b.Run(w.Name, func(b *testing.B) {
			var secs, wal float64
			for range b.N {
				b.StopTimer()
				pool := pb.NewPool(b)
				ctx := b.Context()
				if _, err := table.Ensure(ctx, pool, month); err != nil {
					b.Fatal(err)
				}
				pb.Fill(b, pool, month, rows)
				for _, sql := range []string{`VACUUM ANALYZE ` + pb.Table.Name, `CHECKPOINT`} {
					if _, err := pool.Exec(ctx, sql); err != nil {
						b.Fatal(err)
					}
				}
				var lsn string
				if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				b.StartTimer()
				n := w.Purge(b, pool)
				b.StopTimer()
				secs += time.Since(start).Seconds()
				var bytes float64
				if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8`, lsn).Scan(&bytes); err != nil {
					b.Fatal(err)
				}
				wal += bytes
				if n != int64(rows) {
					b.Fatalf("purged %d rows, want %d", n, rows)
				}
				var left int64
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pb.Table.Name).Scan(&left); err != nil {
					b.Fatal(err)
				}
				if left != 0 {
					b.Fatalf("%d rows left", left)
				}
			}
			b.ReportMetric(secs/float64(b.N), "s/month")
			b.ReportMetric(wal/float64(b.N), "WAL-B/month")
			b.ReportMetric(float64(rows), "rows/month")
		})
	}
}
