package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/domain"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestFoldAndPendingReadWorkInChunks: a tenant's 30 pending summary deltas
// (3 prices, 12 usage facts over 3 meters, their 12 charges in two
// currencies, 2 adjustments and a close) and another tenant's 5, with a
// chunk of 4. The summary reads the 30 in statements of 4, 4, 4, 4, 4, 4, 4
// and 2. The fold moves them in chunks of 4, each its own transaction: a
// crash in the third chunk leaves the first two folded and the rest
// pending, the summary unchanged, and the next round folds the 22 left in
// 4, 4, 4, 4, 4 and 2. The folded totals then equal those of the same
// events folded in one chunk (the default) in another database: nothing
// lost, nothing folded twice. Without the chunk's limit one statement reads
// all 30 and the test fails.
func TestFoldAndPendingReadWorkInChunks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	acme, globex := NewFeed(t, "acme"), NewFeed(t, "globex")
	meters := []string{"api_calls", "storage_gb", "compute_seconds"}
	var evs []Event
	for _, m := range meters {
		evs = append(evs, acme.Price(m, "USD", "0.25"))
	}
	for i := range 12 {
		cur := "USD"
		if i%4 == 3 {
			cur = "EUR"
		}
		u := acme.Usage(meters[i%3], cur, fmt.Sprint(i+1))
		evs = append(evs, u, acme.Charge(u, "2026-11", "0.25"))
	}
	evs = append(evs, acme.Adjustment("2026-11", "USD", "-1.5"), acme.Adjustment("2026-11", "EUR", "2"),
		acme.Close("2026-11"))
	for range 2 {
		u := globex.Usage("api_calls", "USD", "7")
		evs = append(evs, u, globex.Charge(u, "2026-11", "1"))
	}
	evs = append(evs, globex.Close("2026-11"))

	pool, ref := pgtest.NewPool(t, Template), pgtest.NewPool(t, Template)
	// One event a batch here, so each is its own delta (a batch's events of
	// one tenant, kind and key share one: TestBatchSharesDeltas).
	ib, ibRef := NewInbox(t), NewInbox(t)
	for _, e := range evs {
		Decide(t, pool, ib, e)
		Decide(t, ref, ibRef, e)
	}
	if n := pending(t, pool, "acme"); n != 30 {
		t.Fatalf("%d pending deltas of acme, want 30", n)
	}

	chunked := app.New(app.Deps{Pool: pool}, app.Config{FoldChunk: 4})
	var reads []int64
	chunked.SetAfterReadChunk(func(n int64) { reads = append(reads, n) })
	read := func(want ...int64) string {
		t.Helper()
		reads = nil
		s, err := chunked.Summary(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(reads, want) {
			t.Errorf("the summary read the pending deltas in statements of %v, want %v", reads, want)
		}
		return figures(s)
	}

	// The pending read, before any fold: in statements of at most 4, and
	// the figures of a read in one statement.
	before := read(4, 4, 4, 4, 4, 4, 4, 2)
	whole := app.New(app.Deps{Pool: pool}, app.Config{})
	reads = nil
	whole.SetAfterReadChunk(func(n int64) { reads = append(reads, n) })
	s, err := whole.Summary(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(reads, []int64{30}) || figures(s) != before {
		t.Fatalf("read in one statement (%v): %s; in chunks of 4: %s", reads, figures(s), before)
	}
	if !strings.Contains(before, "usage 12 ") {
		t.Fatalf("summary before the fold: %s, want 12 usage facts", before)
	}

	// A crash in acme's third chunk: its first two stay folded, the rest
	// pending, and the figures do not move.
	folds := map[string][]int64{}
	errCrash := errors.New("crash")
	chunked.SetAfterFoldChunk(func(tenant string, n int64) error {
		if tenant == "acme" && len(folds[tenant]) == 2 {
			return errCrash
		}
		folds[tenant] = append(folds[tenant], n)
		return nil
	})
	_, err = chunked.FoldOnce(ctx)
	if !slices.Equal(folds["acme"], []int64{4, 4}) {
		t.Errorf("acme's chunks committed before the crash %v, want 4, 4", folds["acme"])
	}
	if !errors.Is(err, errCrash) {
		t.Fatalf("fold with a crash in the third chunk: %v", err)
	}
	if n := pending(t, pool, "acme"); n != 22 {
		t.Fatalf("%d pending deltas of acme after the crash, want 22 (two chunks of 4 folded)", n)
	}
	if got := read(4, 4, 4, 4, 4, 2); got != before {
		t.Fatalf("summary after the crash %s, before the fold %s", got, before)
	}

	// The next round carries on: the 22 left in chunks of at most 4.
	chunked.SetAfterFoldChunk(func(tenant string, n int64) error {
		folds[tenant] = append(folds[tenant], n)
		return nil
	})
	if _, err := chunked.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(folds["acme"], []int64{4, 4, 4, 4, 4, 4, 4, 2}) || !slices.Equal(folds["globex"], []int64{4, 1}) {
		t.Errorf("fold chunks %v, want acme's 4, 4 then 4, 4, 4, 4, 4, 2 and globex's 4, 1", folds)
	}
	if n := pending(t, pool, "acme") + pending(t, pool, "globex"); n != 0 {
		t.Fatalf("%d deltas pending after the retry", n)
	}
	if got := read(); got != before {
		t.Fatalf("summary after the fold %s, before it %s", got, before)
	}

	// The same events folded in one chunk: the same totals.
	oneShot := app.New(app.Deps{Pool: ref}, app.Config{})
	refFolds := map[string][]int64{}
	oneShot.SetAfterFoldChunk(func(tenant string, n int64) error {
		refFolds[tenant] = append(refFolds[tenant], n)
		return nil
	})
	if _, err := oneShot.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(refFolds["acme"], []int64{30}) || !slices.Equal(refFolds["globex"], []int64{5}) {
		t.Fatalf("one-shot fold chunks %v, want 30 and 5", refFolds)
	}
	got, want := folded(t, pool), folded(t, ref)
	if got != want {
		t.Fatalf("folded in chunks of 4 with a crash:\n%s\nfolded in one chunk:\n%s", got, want)
	}
	t.Logf("folded in chunks: %v; one-shot:\n%s", folds, want)
}

// figures are a summary's figures as text (decimals without trailing
// zeros, maps in key order).
func figures(s domain.Summary) string {
	return fmt.Sprintf("usage %d quantity %v charged %v adjusted %v invoiced %v last %v",
		s.UsageCount, s.QuantityByMeter, s.Charged, s.Adjusted, s.Invoiced, s.LastEventAt)
}

// pending counts a tenant's deltas not folded yet.
func pending(t *testing.T, pool *pgxpool.Pool, tenant string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM summary_delta WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// folded is every tenant's folded totals and summary, as text.
func folded(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var out string
	err := pool.QueryRow(context.Background(), `
		SELECT (SELECT string_agg(format('%s %s %s %s %s', tenant_id, kind, key, amount, events), E'\n'
		                          ORDER BY tenant_id, kind, key) FROM tenant_total)
		       || E'\n' ||
		       (SELECT string_agg(format('%s %s %s', tenant_id, events, last_event_at AT TIME ZONE 'UTC'), E'\n'
		                          ORDER BY tenant_id) FROM tenant_summary)`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBatchSharesDeltas: one batch of 12 usage facts (acme's 7 on
// api_calls and 3 on storage_gb, globex's 2) and one of acme's 7 charges
// leave 4 pending deltas, one per tenant, kind and key, standing for the
// 19 events. The summary, read before the fold and after it, is that of
// the same events decided one at a time (a delta each) in another
// database, and the batch delivered again adds no delta.
func TestBatchSharesDeltas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	acme, globex := NewFeed(t, "acme"), NewFeed(t, "globex")
	var usage, charges []Event
	for i := range 10 {
		meter := "api_calls"
		if i%3 == 2 {
			meter = "storage_gb"
		}
		u := acme.Usage(meter, "USD", fmt.Sprint(i+1))
		usage = append(usage, u)
		if meter == "api_calls" {
			charges = append(charges, acme.Charge(u, "2026-11", "0.25"))
		}
		if i < 2 {
			usage = append(usage, globex.Usage("api_calls", "USD", "5"))
		}
	}
	pool, ref := pgtest.NewPool(t, Template), pgtest.NewPool(t, Template)
	ib, ibRef := NewInbox(t), NewInbox(t)
	Decide(t, pool, ib, usage...)
	Decide(t, pool, ib, charges...)
	for _, e := range append(slices.Clone(usage), charges...) {
		Decide(t, ref, ibRef, e)
	}
	var rows, events int64
	counts := func() (int64, int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*), COALESCE(sum(events), 0) FROM summary_delta`).Scan(&rows, &events); err != nil {
			t.Fatal(err)
		}
		return rows, events
	}
	if r, e := counts(); r != 4 || e != 19 {
		t.Fatalf("%d pending deltas for %d events, want 4 for 19", r, e)
	}
	summary := func(pool *pgxpool.Pool, tenant string) string {
		t.Helper()
		s, err := app.New(app.Deps{Pool: pool}, app.Config{}).Summary(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return figures(s)
	}
	for _, tenant := range []string{"acme", "globex"} {
		if got, want := summary(pool, tenant), summary(ref, tenant); got != want {
			t.Errorf("%s before the fold: %s, want %s", tenant, got, want)
		}
	}
	if got := summary(pool, "acme"); !strings.Contains(got, "usage 10 ") {
		t.Errorf("acme: %s, want 10 usage facts", got)
	}
	if _, err := app.New(app.Deps{Pool: pool}, app.Config{}).FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := app.New(app.Deps{Pool: ref}, app.Config{}).FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := folded(t, pool), folded(t, ref); got != want {
		t.Fatalf("folded from batches:\n%s\nfolded one event a delta:\n%s", got, want)
	}
	for _, tenant := range []string{"acme", "globex"} {
		if got, want := summary(pool, tenant), summary(ref, tenant); got != want {
			t.Errorf("%s after the fold: %s, want %s", tenant, got, want)
		}
	}
	Decide(t, pool, NewInbox(t), usage...)
	if r, e := counts(); r != 0 || e != 0 {
		t.Errorf("the usage batch delivered again left %d deltas for %d events, want none", r, e)
	}
}
