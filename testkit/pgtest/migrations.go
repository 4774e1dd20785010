package pgtest

import (
	"context"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

var emptyTemplate = Template{Name: "pgtest_empty", Migrate: func(context.Context, string) error { return nil }}

// CheckUpDownUp migrates a fresh, empty database up with sets, down, and up
// again, and fails the test unless up creates tables, down removes every one
// of them (the migration-tracking tables aside), and the second up creates
// the same tables as the first.
func CheckUpDownUp(t *testing.T, sets ...pgmigrate.Set) {
	t.Helper()
	url := NewDB(t, emptyTemplate)
	tables := func() []string {
		t.Helper()
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(context.Background(), `SELECT table_name::text FROM information_schema.tables
			WHERE table_schema = 'public' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "schema_migrations") })
	}
	if err := pgmigrate.Up(url, sets...); err != nil {
		t.Fatalf("up: %v", err)
	}
	first := tables()
	if len(first) == 0 {
		t.Fatal("up created no table")
	}
	if err := pgmigrate.Down(url, sets...); err != nil {
		t.Fatalf("down: %v", err)
	}
	if left := tables(); len(left) != 0 {
		t.Fatalf("down left tables %v", left)
	}
	if err := pgmigrate.Up(url, sets...); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if again := tables(); !slices.Equal(again, first) {
		t.Fatalf("up again created %v, the first up %v", again, first)
	}
}

// UpTo is set with its migrations numbered version or lower only: a test
// migrates a database there, writes rows as that schema took them, then
// applies the rest with set itself and checks what the later migrations
// made of them.
func UpTo(t testing.TB, set pgmigrate.Set, version int) pgmigrate.Set {
	t.Helper()
	sub := fstest.MapFS{}
	err := fs.WalkDir(set.FS, set.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".sql") {
			return err
		}
		name := path.Base(p)
		v, err := strconv.Atoi(name[:max(strings.IndexByte(name, '_'), 0)])
		if err != nil || v > version {
			return err
		}
		b, err := fs.ReadFile(set.FS, p)
		sub[name] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pgmigrate.Set{FS: sub, Dir: ".", Table: set.Table, Needs: set.Needs}
}

// MigratedTo is a new, empty database migrated with sets, the last of them
// (a service's own, as Spec.Sets lists them) only up to version: its URL.
func MigratedTo(t testing.TB, version int, sets ...pgmigrate.Set) string {
	t.Helper()
	url := NewDB(t, emptyTemplate)
	last := len(sets) - 1
	if err := pgmigrate.Up(url, append(slices.Clip(sets[:last]), UpTo(t, sets[last], version))...); err != nil {
		t.Fatalf("migrate up to %04d: %v", version, err)
	}
	return url
}
