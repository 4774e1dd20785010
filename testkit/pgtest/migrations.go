package pgtest

import (
	"context"
	"slices"
	"strings"
	"testing"

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
