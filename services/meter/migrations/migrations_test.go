package migrations_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/services/meter"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// An empty database, so the test runs every migration itself.
var empty = pgtest.Template{Name: "meter_empty", Migrate: func(context.Context, string) error { return nil }}

func TestUpDownUp(t *testing.T) {
	url := pgtest.NewDB(t, empty)
	sets := meter.Spec.Sets()
	tables := func() int {
		t.Helper()
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		err = conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables
			WHERE table_schema = 'public' AND table_name IN ('price', 'price_series', 'outbox_event', 'idempotency_key', 'inbox_event')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := pgmigrate.Up(url, sets...); err != nil {
		t.Fatalf("up: %v", err)
	}
	if n := tables(); n != 5 {
		t.Fatalf("after up: %d tables, want 5", n)
	}
	if err := pgmigrate.Down(url, sets...); err != nil {
		t.Fatalf("down: %v", err)
	}
	if n := tables(); n != 0 {
		t.Fatalf("after down: %d tables, want 0", n)
	}
	if err := pgmigrate.Up(url, sets...); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if n := tables(); n != 5 {
		t.Fatalf("after up again: %d tables, want 5", n)
	}
}
