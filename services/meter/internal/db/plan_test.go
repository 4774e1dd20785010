package db

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/meter/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var tmpl = pgtest.Template{
	Name: "meter-db",
	Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, migrations.Set)
	},
}

// The price lists read a page with one range scan of price_version_key
// that starts at the cursor's position: no sort, no scan of the pages
// before. Scans other than through an index, and sorts, are priced out so
// that the plan shows whether the index can serve the query, whatever the
// table's size.
func TestPriceListsScanTheIndexFromThePosition(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	tests := []struct {
		name  string
		sql   string
		args  []any
		bound string // the position, as an index condition
	}{
		{"ListPrices", listPrices, []any{"t1", "api_calls", "USD", int64(3), int32(101)},
			"ROW(meter_code, currency, version) > ROW("},
		{"ListMeterPrices", listMeterPrices, []any{"t1", "api_calls", "USD", int64(3), int32(101)},
			"ROW(currency, version) > ROW("},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(t.Context())
			if _, err := tx.Exec(t.Context(), `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
				SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off`); err != nil {
				t.Fatal(err)
			}
			rows, err := tx.Query(t.Context(), "EXPLAIN "+tt.sql, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, "Index Scan using price_version_key on price") || strings.Contains(text, "Sort") ||
				strings.Contains(strings.ToLower(text), "disabled") || !strings.Contains(text, tt.bound) {
				t.Fatalf("plan does not range-scan price_version_key from the position:\n%s", text)
			}
		})
	}
}
