package app_test

import (
	"testing"

	"github.com/usagebilling/billing/services/query/internal/db"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestPendingDeltasCountUpToTheCap: the count behind summary_deltas_pending
// reads a backlog of more than 10,000 deltas as 10,000 (a bounded read
// whatever the backlog) and a smaller one exactly.
func TestPendingDeltasCountUpToTheCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	insert := func(n int) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `
			INSERT INTO summary_delta (tenant_id, kind, key, amount, occurred_at)
			SELECT 't' || (i % 7), 'usage', 'api_calls', 1, now() FROM generate_series(1, $1) i`, n); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int64 {
		t.Helper()
		n, err := db.New(pool).CountPendingDeltas(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert(9)
	if n := count(); n != 9 {
		t.Fatalf("%d pending, want 9", n)
	}
	insert(10000)
	if n := count(); n != 10000 {
		t.Fatalf("%d pending, want 10,000 (the cap)", n)
	}
}
