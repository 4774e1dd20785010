package migrations_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/services/query/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var empty = pgtest.Template{Name: "empty", Migrate: func(context.Context, string) error { return nil }}

func TestUpDownUp(t *testing.T) {
	url := pgtest.NewDB(t, empty)
	tables := func() int {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables
			WHERE table_schema = 'public' AND table_name IN ('projected_event', 'projected_invoice_line', 'summary_delta', 'tenant_total', 'tenant_summary', 'quarantine_notice', 'redrive_audit')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, step := range []struct {
		name  string
		run   func(string, ...pgmigrate.Set) error
		count int
	}{{"up", pgmigrate.Up, 7}, {"down", pgmigrate.Down, 0}, {"up again", pgmigrate.Up, 7}} {
		if err := step.run(url, migrations.Set); err != nil {
			t.Fatalf("step %d %s: %v", i, step.name, err)
		}
		if n := tables(); n != step.count {
			t.Fatalf("after %s: %d tables, want %d", step.name, n, step.count)
		}
	}
}
