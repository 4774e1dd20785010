package app_test

import (
	"testing"
	"time"

	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// The upkeep makes the partitions of charge of this month and MonthsAhead
// after it that are missing (as after three months without a start), each
// with the trigger refusing its truncation, and only those.
func TestAddMonthsMakesTheMonthsAhead(t *testing.T) {
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	now := time.Now().UTC()
	last := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, app.MonthsAhead, 0)
	for _, m := range []time.Time{now, last} {
		// Detached first: the adjustments' foreign key depends on an
		// attached partition.
		name := "charge_" + m.Format("2006_01")
		for _, q := range []string{`ALTER TABLE charge DETACH PARTITION ` + name, `DROP TABLE ` + name} {
			if _, err := pool.Exec(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	if n, err := svc.AddMonths(t.Context()); err != nil || n != 2 {
		t.Fatalf("made %d, %v; want the 2 dropped", n, err)
	}
	if n, err := svc.AddMonths(t.Context()); err != nil || n != 0 {
		t.Fatalf("made %d again, %v; want none", n, err)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM pg_inherits i WHERE i.inhparent = 'charge'::regclass
		AND EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = i.inhrelid AND g.tgname = 'charge_not_truncated')`); n != 2+app.MonthsAhead {
		t.Fatalf("%d partitions refusing truncation, want the first, this month and %d ahead", n, app.MonthsAhead)
	}
}
