package app_test

import (
	"testing"
	"time"

	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
)

// The upkeep makes the partitions of this month and MonthsAhead after it
// that are missing (as after three months without a start), and only those.
func TestAddMonthsMakesTheMonthsAhead(t *testing.T) {
	e := usagetest.New(t)
	a := app.New(app.Deps{Pool: e.Pool}, app.Config{})
	now := time.Now().UTC()
	last := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, app.MonthsAhead, 0)
	for _, m := range []time.Time{now, last} {
		if _, err := e.Pool.Exec(t.Context(), `DROP TABLE usage_fact_`+m.Format("2006_01")); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := a.AddMonths(t.Context()); err != nil || n != 2 {
		t.Fatalf("made %d, %v; want the 2 dropped", n, err)
	}
	if n, err := a.AddMonths(t.Context()); err != nil || n != 0 {
		t.Fatalf("made %d again, %v; want none", n, err)
	}
	if n := e.Count(t, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_fact'::regclass`); n != 2+app.MonthsAhead {
		t.Fatalf("%d partitions, want the first, this month and %d ahead", n, app.MonthsAhead)
	}
}
