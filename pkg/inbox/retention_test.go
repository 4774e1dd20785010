package inbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// PurgeEvents deletes only what was decided before the retention, in
// batches of the limit, and keeps the newest version of each aggregate of a
// kept type, so the next version still finds its predecessor.
func TestPurgeEventsRemovesOnlyWhatIsPastItsAge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	for _, e := range []struct {
		agg string
		v   int64
	}{{"a", 1}, {"a", 2}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}} {
		wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, e.agg, e.v, note{Origin: origin(e.agg)}))), "applied")
	}
	// Everything but c was decided 20 days ago; c just now.
	if _, err := pool.Exec(ctx, `UPDATE inbox_event SET applied_at = now() - interval '20 days' WHERE aggregate_id <> 'c'`); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-14 * 24 * time.Hour)
	left := func() []string {
		rows, err := pool.Query(ctx, `SELECT aggregate_id || '@' || aggregate_version FROM inbox_event ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// The type is kept: only a@1, which a@2 follows, goes.
	n, err := inbox.PurgeEvents(ctx, pool, cutoff, []string{"thing"}, 100)
	if err != nil || n != 1 {
		t.Fatalf("purged %d, %v; want 1", n, err)
	}
	if got := left(); !slices.Equal(got, []string{"a@2", "b@1", "c@1", "d@1", "e@1"}) {
		t.Fatalf("left %v", got)
	}
	// The next version of a comes and finds its predecessor.
	wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, "a", 3, note{Origin: origin("a")}))), "applied")

	// Not a kept type: the old ones go, in batches of the limit; the fresh
	// ones stay.
	n, err = inbox.PurgeEvents(ctx, pool, cutoff, nil, 2)
	if err != nil || n != 2 {
		t.Fatalf("first batch purged %d, %v; want 2", n, err)
	}
	n, err = inbox.PurgeEvents(ctx, pool, cutoff, nil, 2)
	if err != nil || n != 2 {
		t.Fatalf("second batch purged %d, %v; want 2", n, err)
	}
	n, err = inbox.PurgeEvents(ctx, pool, cutoff, nil, 2)
	if err != nil || n != 0 {
		t.Fatalf("third batch purged %d, %v; want 0", n, err)
	}
	if got := left(); !slices.Equal(got, []string{"a@3", "c@1"}) {
		t.Fatalf("left %v, want the fresh rows a@3 and c@1", got)
	}
}

// A deferred event past the maximum age is quarantined as deferred_expired
// (announced like any quarantine, counted, listed), and a redrive brings it
// back: applied once its predecessor is there, deferred again otherwise.
func TestExpiredDeferredEventIsQuarantinedAndRedriven(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	reg := prometheus.NewRegistry()
	var notices []inbox.Quarantined
	ib := newInbox(t, inbox.Options{Registerer: reg, OnQuarantine: func(_ context.Context, _ pgx.Tx, q inbox.Quarantined) error {
		notices = append(notices, q)
		return nil
	}})
	x2 := ev(t, "Noted", 1, "x", 2, note{Origin: origin("x")})
	y2 := ev(t, "Noted", 1, "y", 2, note{Origin: origin("y")})
	z2 := ev(t, "Noted", 1, "z", 2, note{Origin: origin("z")})
	wantOutcomes(t, decide(t, ib, pool, raw(t, x2), raw(t, y2), raw(t, z2)),
		"deferred:version_gap", "deferred:version_gap", "deferred:version_gap")
	if _, err := pool.Exec(ctx, `UPDATE inbox_deferred SET first_seen = now() - interval '2 days'
		WHERE aggregate_id IN ('x', 'y')`); err != nil {
		t.Fatal(err)
	}
	n, err := ib.ExpireDeferred(ctx, pool, time.Now().Add(-24*time.Hour), 100)
	if err != nil || n != 2 {
		t.Fatalf("expired %d, %v; want 2 (x and y, not the fresh z)", n, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred WHERE aggregate_id = 'z'`); got != 1 {
		t.Fatal("the fresh deferred event was touched")
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 1 {
		t.Fatalf("%d deferred left, want 1", got)
	}
	qs, err := inbox.ListQuarantine(ctx, pool, inbox.QuarantineFilter{Reason: inbox.ReasonDeferredExpired})
	if err != nil || len(qs) != 2 {
		t.Fatalf("quarantine %v, %v", qs, err)
	}
	for _, q := range qs {
		if !strings.Contains(q.Detail, "agg/t1/thing/") || q.EventType != "Noted" {
			t.Fatalf("quarantined %+v: want the wait key in the detail", q)
		}
	}
	if len(notices) != 2 || notices[0].Reason != inbox.ReasonDeferredExpired {
		t.Fatalf("notices %+v", notices)
	}
	if got := metricValue(t, reg, "inbox_deferred_expired_total", nil); got != 2 {
		t.Fatalf("inbox_deferred_expired_total %v", got)
	}
	// Nothing left to expire.
	if n, err := ib.ExpireDeferred(ctx, pool, time.Now().Add(-24*time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("expired again %d, %v", n, err)
	}

	// x's predecessor arrives (it wakes nothing: x is no longer deferred),
	// then a redrive applies x.
	wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, "x", 1, note{Origin: origin("x")}))), "applied")
	redrive := func(e [16]byte) []inbox.Decision {
		var ds []inbox.Decision
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			ds, err = ib.Redrive(ctx, tx, e)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ds
	}
	wantOutcomes(t, redrive(x2.EventID), "applied")
	if got := effectVersions(t, pool, "x"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("effects of x %v", got)
	}
	// y's predecessor is still missing: the redrive defers it again, with a
	// fresh age.
	wantOutcomes(t, redrive(y2.EventID), "deferred:version_gap")
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred
		WHERE aggregate_id = 'y' AND first_seen > now() - interval '1 hour'`); got != 1 {
		t.Fatal("y is not deferred again")
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE state = 'redriven'`); got != 2 {
		t.Fatalf("%d quarantine rows redriven, want 2", got)
	}
}

// PurgeRedriven deletes the quarantine rows redriven before the retention,
// in batches of the limit; a row still quarantined stays whatever its age
// (it waits for an operator), and so does one redriven recently.
func TestPurgeRedrivenKeepsWhatAwaitsAnOperator(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	wantOutcomes(t, decide(t, ib, pool, []byte("old-redriven-1"), []byte("old-redriven-2"), []byte("new-redriven"), []byte("old-open")),
		"quarantined:malformed", "quarantined:malformed", "quarantined:malformed", "quarantined:malformed")
	if _, err := pool.Exec(ctx, `
		UPDATE inbox_quarantine SET first_seen = now() - interval '30 days',
		       state = CASE WHEN convert_from(raw, 'UTF8') = 'old-open' THEN 'quarantined' ELSE 'redriven' END,
		       redriven_at = CASE convert_from(raw, 'UTF8') WHEN 'old-open' THEN NULL WHEN 'new-redriven' THEN now()
		                     ELSE now() - interval '20 days' END`); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-14 * 24 * time.Hour)
	for i, want := range []int64{1, 1, 0} {
		if n, err := inbox.PurgeRedriven(ctx, pool, cutoff, 1); err != nil || n != want {
			t.Fatalf("batch %d purged %d, %v; want %d", i+1, n, err, want)
		}
	}
	rows, err := pool.Query(ctx, `SELECT convert_from(raw, 'UTF8') FROM inbox_quarantine ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"new-redriven", "old-open"}) {
		t.Fatalf("left %v, want the recent redrive and the row still quarantined", left)
	}
}
