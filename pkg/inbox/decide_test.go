package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func wantOutcomes(t *testing.T, ds []inbox.Decision, want ...string) {
	t.Helper()
	if got := outcomes(ds); !slices.Equal(got, want) {
		t.Fatalf("decisions\n got %q\nwant %q", got, want)
	}
}

func TestMigrateUpDownUp(t *testing.T) {
	pgtest.CheckUpDownUp(t, inbox.Migrations)
}

func TestConcurrentDeliveriesApplyOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	m := raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: origin("c")}))

	const n = 8
	results := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			ctx := t.Context()
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				ds, err := ib.Decide(ctx, tx, msgs(m))
				if err == nil {
					results[i] = ds[0].Outcome
				}
				return err
			})
			if err != nil {
				t.Errorf("delivery %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	slices.Sort(results)
	want := []string{"applied", "duplicate", "duplicate", "duplicate", "duplicate", "duplicate", "duplicate", "duplicate"}
	if !slices.Equal(results, want) {
		t.Fatalf("outcomes %q, want %q", results, want)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 1 {
		t.Fatalf("%d effects, want 1", got)
	}
}

// A delivery whose claim waits for a concurrent delivery of the same event
// id, which then commits, is decided from that delivery's row: the claim's
// own statement reads a snapshot from before the wait, so the row is read
// again (a duplicate when the digests agree, a digest conflict when they do
// not), never taken for another event holding the slot.
func TestClaimAfterConcurrentCommitReadsTheRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		payload string
		want    string
	}{
		{"same digest", "", "duplicate"},
		{"other digest", `{"origin":"o-other"}`, "quarantined:digest_conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t, tmpl)
			ib := newInbox(t, inbox.Options{})
			first := ev(t, "Noted", 1, "a", 1, note{Origin: "o-first"})
			second := raw(t, first)
			if tc.payload != "" {
				second = raw(t, withPayload(t, first, tc.payload))
			}
			ctx := t.Context()
			holder, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(ctx)
			if ds, err := ib.Decide(ctx, holder, msgs(raw(t, first))); err != nil {
				t.Fatal(err)
			} else {
				wantOutcomes(t, ds, "applied")
			}
			var outs []string
			done := make(chan error, 1)
			go func() {
				done <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					ds, err := ib.Decide(ctx, tx, msgs(second))
					outs = outcomes(ds)
					return err
				})
			}()
			// The second delivery's claim waits for the first's lock.
			for waiting := false; !waiting; {
				if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'
					  AND query LIKE '%INSERT INTO inbox_event%')`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					t.Fatalf("the second delivery did not wait for the first (%v, %q)", err, outs)
				default:
				}
			}
			if err := holder.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("second delivery: %v", err)
			}
			if !slices.Equal(outs, []string{tc.want}) {
				t.Fatalf("second delivery decided %q, want %q", outs, tc.want)
			}
			if got := count(t, pool, `SELECT count(*) FROM effect`); got != 1 {
				t.Fatalf("%d effects, want 1", got)
			}
		})
	}
}

func TestSameBatchRedeliveryIsDuplicate(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	a := raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: origin("r")}))
	b := raw(t, ev(t, "Noted", 1, "b", 1, note{Origin: origin("r")}))
	ds := decide(t, ib, pool, a, b, a, b, a)
	wantOutcomes(t, ds, "applied", "applied", "duplicate", "duplicate", "duplicate")
	ds = decide(t, ib, pool, a)
	wantOutcomes(t, ds, "duplicate")
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 2 {
		t.Fatalf("%d effects, want 2", got)
	}
}

func TestDigestConflictIsQuarantined(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})

	first := ev(t, "Noted", 1, "a", 1, note{Origin: "o-first"})
	wantOutcomes(t, decide(t, ib, pool, raw(t, first)), "applied")
	other := raw(t, withPayload(t, first, `{"origin":"o-other"}`))
	ds := decide(t, ib, pool, other)
	wantOutcomes(t, ds, "quarantined:digest_conflict")
	if ds[0].EventID != first.EventID {
		t.Fatalf("decision event id %s, want %s", ds[0].EventID, first.EventID)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-other'`); got != 0 {
		t.Fatalf("conflicting event applied")
	}
	var stored []byte
	var eventID uuid.UUID
	if err := pool.QueryRow(t.Context(), `SELECT raw, event_id FROM inbox_quarantine WHERE reason = 'digest_conflict'`).
		Scan(&stored, &eventID); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, other) || eventID != first.EventID {
		t.Fatalf("quarantine holds %s for %s, want the conflicting message", stored, eventID)
	}

	// Against a deferred event: the deferred one stays, the other is
	// quarantined.
	v2 := ev(t, "Noted", 1, "b", 2, note{Origin: "o-b2"})
	wantOutcomes(t, decide(t, ib, pool, raw(t, v2)), "deferred:version_gap")
	wantOutcomes(t, decide(t, ib, pool, raw(t, withPayload(t, v2, `{"origin":"o-b2-other"}`))), "quarantined:digest_conflict")
	wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, "b", 1, note{Origin: "o-b1"}))),
		"applied", "applied+woken")
	if got := effectVersions(t, pool, "b"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("effects of b %v, want [1 2]", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-b2-other'`); got != 0 {
		t.Fatalf("conflicting deferred event applied")
	}
}

func TestVersionGapDefersUntilPredecessor(t *testing.T) {
	t.Parallel()
	t.Run("same batch", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, tmpl)
		ib := newInbox(t, inbox.Options{})
		v1 := raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: origin("g")}))
		v2 := raw(t, ev(t, "Noted", 1, "a", 2, note{Origin: origin("g")}))
		v3 := raw(t, ev(t, "Noted", 1, "a", 3, note{Origin: origin("g")}))
		ds := decide(t, ib, pool, v3, v2, v1)
		wantOutcomes(t, ds, "deferred:version_gap", "deferred:version_gap", "applied", "applied+woken", "applied+woken")
		if ds[0].WaitKey != inbox.AggregateKey("t1", "thing", "a", 2) {
			t.Fatalf("wait key %q", ds[0].WaitKey)
		}
		if got := effectVersions(t, pool, "a"); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("effects applied in order %v, want [1 2 3]", got)
		}
		if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 0 {
			t.Fatalf("%d deferred left", got)
		}
	})
	t.Run("across batches", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, tmpl)
		ib := newInbox(t, inbox.Options{})
		v1 := raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: origin("g")}))
		v2 := raw(t, ev(t, "Noted", 1, "a", 2, note{Origin: origin("g")}))
		v3 := raw(t, ev(t, "Noted", 1, "a", 3, note{Origin: origin("g")}))
		wantOutcomes(t, decide(t, ib, pool, v3), "deferred:version_gap")
		wantOutcomes(t, decide(t, ib, pool, v3), "deferred:version_gap") // redelivered
		if got := count(t, pool, `SELECT attempts FROM inbox_deferred`); got != 2 {
			t.Fatalf("attempts %d, want 2", got)
		}
		wantOutcomes(t, decide(t, ib, pool, v2), "deferred:version_gap")
		if got := effectVersions(t, pool, "a"); len(got) != 0 {
			t.Fatalf("effects before v1: %v", got)
		}
		wantOutcomes(t, decide(t, ib, pool, v1), "applied", "applied+woken", "applied+woken")
		if got := effectVersions(t, pool, "a"); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("effects applied in order %v, want [1 2 3]", got)
		}
		wantOutcomes(t, decide(t, ib, pool, v1, v2, v3), "duplicate", "duplicate", "duplicate")
		if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 0 {
			t.Fatalf("%d deferred left", got)
		}
	})
}

func TestDeferUntilAppliesWhenKeyProvided(t *testing.T) {
	t.Parallel()
	t.Run("across batches", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, tmpl)
		ib := newInbox(t, inbox.Options{})
		usage := raw(t, ev(t, "Noted", 1, "u", 1, note{Origin: "o-u", Needs: "price/t1/api@1"}))
		ds := decide(t, ib, pool, usage)
		wantOutcomes(t, ds, "deferred:missing_fact")
		if ds[0].WaitKey != "price/t1/api@1" {
			t.Fatalf("wait key %q", ds[0].WaitKey)
		}
		if got := count(t, pool, `SELECT count(*) FROM effect`); got != 0 {
			t.Fatalf("the deferred handler's write was kept")
		}
		price := raw(t, ev(t, "FactProvided", 1, "p", 1, fact{Key: "price/t1/api@1"}))
		wantOutcomes(t, decide(t, ib, pool, price), "applied", "applied+woken")
		if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-u'`); got != 1 {
			t.Fatalf("usage applied %d times, want 1", got)
		}
	})
	t.Run("same batch", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, tmpl)
		ib := newInbox(t, inbox.Options{})
		before := raw(t, ev(t, "Noted", 1, "x", 1, note{Origin: origin("ok")}))
		usage := raw(t, ev(t, "Noted", 1, "u", 1, note{Origin: "o-u", Needs: "price/t1/api@1"}))
		price := raw(t, ev(t, "FactProvided", 1, "p", 1, fact{Key: "price/t1/api@1"}))
		after := raw(t, ev(t, "Noted", 1, "x", 2, note{Origin: origin("ok")}))
		ds := decide(t, ib, pool, before, usage, price, after)
		wantOutcomes(t, ds, "applied", "deferred:missing_fact", "applied", "applied", "applied+woken")
		if got := count(t, pool, `SELECT count(*) FROM effect`); got != 3 {
			t.Fatalf("%d effects, want 3", got)
		}
		if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 0 {
			t.Fatalf("%d deferred left", got)
		}
	})
}

// A sweep takes every wait key's longest-due event before any key's
// second: one event whose wake was missed, deferred after 300 that wait
// together on another key, is applied by the first sweep of 50, not after
// six of them (CI's flake hunt saw a price version wait a minute so behind
// its series' facts).
func TestSweepTakesEveryWaitKeyBeforeAnyKeysSecond(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	var facts [][]byte
	for i := range 300 {
		facts = append(facts, raw(t, ev(t, "Noted", 1, fmt.Sprintf("u%d", i), 1, note{Origin: fmt.Sprintf("o-u%d", i), Needs: "schedule@1"})))
	}
	decide(t, ib, pool, facts...)
	wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, "p", 1, note{Origin: "o-p", Needs: "free@p"}))), "deferred:missing_fact")
	// p's fact arrives without an inbox event providing its key: no wake.
	if _, err := pool.Exec(t.Context(), `INSERT INTO fact (key) VALUES ('free@p')`); err != nil {
		t.Fatal(err)
	}
	n, err := ib.Sweep(t.Context(), pool, 50)
	if err != nil || n != 1 || count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-p'`) != 1 {
		t.Fatalf("the first sweep applied %d (%v), want p's event", n, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 300 {
		t.Fatalf("%d deferred left, want the 300 facts still waiting", got)
	}
}

func TestSweepAppliesMissedWake(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	usage := raw(t, ev(t, "Noted", 1, "u", 1, note{Origin: "o-u", Needs: "price/t1/api@7"}))
	wantOutcomes(t, decide(t, ib, pool, usage), "deferred:missing_fact")

	n, err := ib.Sweep(t.Context(), pool, 10)
	if err != nil || n != 0 {
		t.Fatalf("sweep without the fact applied %d, %v", n, err)
	}
	if got := count(t, pool, `SELECT attempts FROM inbox_deferred`); got != 2 {
		t.Fatalf("attempts %d after a sweep, want 2", got)
	}
	n, err = ib.Sweep(t.Context(), pool, 10)
	if err != nil || n != 0 || count(t, pool, `SELECT attempts FROM inbox_deferred`) != 2 {
		t.Fatalf("a sweep retried an event not yet due again (%d, %v)", n, err)
	}
	// Time passes: the event is due again.
	if _, err := pool.Exec(t.Context(), `UPDATE inbox_deferred SET next_attempt = now()`); err != nil {
		t.Fatal(err)
	}
	// The fact arrives without an inbox event providing its key: no wake.
	if _, err := pool.Exec(t.Context(), `INSERT INTO fact (key) VALUES ('price/t1/api@7')`); err != nil {
		t.Fatal(err)
	}
	n, err = ib.Sweep(t.Context(), pool, 10)
	if err != nil || n != 1 {
		t.Fatalf("sweep applied %d, %v; want 1", n, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-u'`); got != 1 {
		t.Fatalf("usage applied %d times", got)
	}
	st, err := ib.Stats(t.Context(), pool)
	if err != nil || st.Deferred != 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

func TestQuarantineKeepsReasonAndRawBytes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	var notices []inbox.Quarantined
	ib := newInbox(t, inbox.Options{OnQuarantine: func(ctx context.Context, tx pgx.Tx, q inbox.Quarantined) error {
		notices = append(notices, q)
		return nil
	}})
	garbage := []byte("\x00not json at all")
	unknown := ev(t, "Unhandled", 1, "k", 1, note{Origin: origin("q")})
	v2 := ev(t, "Noted", 2, "s", 1, note{Origin: origin("q")})
	bad := ev(t, "Noted", 1, "p", 1, note{Origin: "o-bad", Fail: "permanent"})
	ds := decide(t, ib, pool,
		raw(t, ev(t, "Noted", 1, "h", 1, note{Origin: origin("ok")})),
		garbage,
		raw(t, unknown),
		raw(t, v2),
		raw(t, bad),
		raw(t, ev(t, "Noted", 1, "h", 2, note{Origin: origin("ok")})),
		garbage,
	)
	wantOutcomes(t, ds, "applied", "quarantined:malformed", "quarantined:unknown_event_type",
		"quarantined:unsupported_schema", "quarantined:bad_note", "applied", "quarantined:malformed")
	if ds[1].EventID != uuid.Nil || ds[3].EventID != v2.EventID {
		t.Fatalf("event ids %s, %s", ds[1].EventID, ds[3].EventID)
	}
	if got := effectVersions(t, pool, "h"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("healthy effects %v", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-bad'`); got != 0 {
		t.Fatalf("the permanent failure's write was kept")
	}

	rows, err := pool.Query(t.Context(), `
		SELECT reason, raw, tenant_id IS NULL, attempts, state FROM inbox_quarantine ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		reason   string
		raw      []byte
		noTenant bool
		attempts int
		state    string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.reason, &x.raw, &x.noTenant, &x.attempts, &x.state)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{"malformed", garbage, true, 2, "quarantined"},
		{"unknown_event_type", raw(t, unknown), false, 1, "quarantined"},
		{"unsupported_schema", raw(t, v2), false, 1, "quarantined"},
		{"bad_note", raw(t, bad), false, 1, "quarantined"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d quarantine rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.reason != w.reason || !bytes.Equal(g.raw, w.raw) || g.noTenant != w.noTenant || g.attempts != w.attempts || g.state != w.state {
			t.Errorf("quarantine row %d = %+v, want %+v", i, g, w)
		}
	}
	if len(notices) != 4 {
		t.Fatalf("%d quarantine notices, want one per row", len(notices))
	}
	st, err := ib.Stats(t.Context(), pool)
	if err != nil || st.Quarantined != 4 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

// A run claims with a plain INSERT first; a run that meets a taken key
// rolls that claim back and claims again with ON CONFLICT DO NOTHING, and
// is decided as before. The runs after it claim with ON CONFLICT DO
// NOTHING at once until 16 in a row meet no taken key (a redelivery comes
// in stretches). inbox_claim_retries_total counts the claims rolled back.
func TestFirstClaimRolledBackOnATakenKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	reg := prometheus.NewRegistry()
	ib := newInbox(t, inbox.Options{Registerer: reg})
	retries := func() float64 {
		return metricValue(t, reg, "inbox_claim_retries_total", map[string]string{"service": "test"})
	}
	note1 := func(aggregate string) []byte {
		return raw(t, ev(t, "Noted", 1, aggregate, 1, note{Origin: origin("f")}))
	}
	a, b := note1("a"), note1("b")
	wantOutcomes(t, decide(t, ib, pool, a), "applied")
	if got := retries(); got != 0 {
		t.Fatalf("a run of new events: %v claims rolled back, want 0", got)
	}
	// a redelivered beside a new event: the plain claim fails on a's id.
	wantOutcomes(t, decide(t, ib, pool, b, a), "applied", "duplicate")
	if got := retries(); got != 1 {
		t.Fatalf("a run meeting a taken key: %v claims rolled back, want 1", got)
	}
	// Another event holding a's slot: refused by the slot, decided as before.
	wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: origin("f")}))),
		"duplicate:version_already_applied")
	if got := retries(); got != 1 {
		t.Fatalf("the run after one that met a taken key claimed plainly: %v claims rolled back, want 1", got)
	}
	for i := range 16 {
		wantOutcomes(t, decide(t, ib, pool, note1(fmt.Sprintf("clean-%d", i))), "applied")
	}
	wantOutcomes(t, decide(t, ib, pool, a, note1("c")), "duplicate", "applied")
	if got := retries(); got != 2 {
		t.Fatalf("16 runs after the last taken key: %v claims rolled back, want 2", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 19 {
		t.Fatalf("%d effects, want 19 (a, b, c and 16 clean)", got)
	}
}

func TestBusinessUniqueViolationIsDuplicate(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	reg := prometheus.NewRegistry()
	ib := newInbox(t, inbox.Options{Registerer: reg})
	// Two events whose effects have the same origin: the second is a
	// duplicate of an effect that already exists, found by the business
	// constraint rather than the inbox key.
	wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, "x", 1, note{Origin: "o-same"}))), "applied")
	ds := decide(t, ib, pool,
		raw(t, ev(t, "Noted", 1, "h", 1, note{Origin: origin("ok")})),
		raw(t, ev(t, "Noted", 1, "y", 1, note{Origin: "o-same"})),
		raw(t, ev(t, "Noted", 1, "h", 2, note{Origin: origin("ok")})),
	)
	wantOutcomes(t, ds, "applied", "duplicate:effect_exists:effect_origin_key", "applied")
	// The duplicate keeps its inbox key, so its aggregate moves on.
	wantOutcomes(t, decide(t, ib, pool, raw(t, ev(t, "Noted", 1, "y", 2, note{Origin: origin("ok")}))), "applied")
	if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-same'`); got != 1 {
		t.Fatalf("%d effects of o-same", got)
	}
	if got := metricValue(t, reg, "inbox_decisions_total", map[string]string{"outcome": "duplicate", "event_type": "Noted", "service": "test"}); got != 1 {
		t.Fatalf("duplicate decisions counted %v, want 1", got)
	}

	// With origin constraints named, another unique violation is not a
	// duplicate but a permanent error.
	strict := newInbox(t, inbox.Options{OriginConstraints: []string{"some_other_key"}})
	wantOutcomes(t, decide(t, strict, pool, raw(t, ev(t, "Noted", 1, "z", 1, note{Origin: "o-same"}))),
		"quarantined:integrity_violation:effect_origin_key")
}

func TestHandlerFailuresInBigBatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	var raws [][]byte
	var want []string
	chain, bad := int64(0), 0
	for i := range 120 {
		switch {
		case i%13 == 5:
			bad++
			raws = append(raws, raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("bad"), Fail: "permanent"})))
			want = append(want, "quarantined:bad_note")
		case i%7 == 3:
			raws = append(raws, raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("d"), Needs: "never"})))
			want = append(want, "deferred:missing_fact")
		case i%4 == 1:
			chain++
			raws = append(raws, raw(t, ev(t, "Noted", 1, "chain", chain, note{Origin: origin("c")})))
			want = append(want, "applied")
		default:
			raws = append(raws, raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: origin("ok")})))
			want = append(want, "applied")
		}
	}
	wantOutcomes(t, decide(t, ib, pool, raws...), want...)
	applied := 0
	for _, w := range want {
		if w == "applied" {
			applied++
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM effect`); n != applied {
		t.Fatalf("%d effects for %d applied decisions", n, applied)
	}
	if got := effectVersions(t, pool, "chain"); len(got) != int(chain) || !slices.IsSorted(got) {
		t.Fatalf("chain effects %v", got)
	}
	// Redelivered whole: every event is a duplicate or still waits.
	for i := range want {
		switch want[i] {
		case "applied":
			want[i] = "duplicate"
		case "quarantined:bad_note":
			want[i] = "quarantined:bad_note" // identical bytes: the same row, one more attempt
		}
	}
	wantOutcomes(t, decide(t, ib, pool, raws...), want...)
	if n := count(t, pool, `SELECT count(*) FROM effect`); n != applied {
		t.Fatalf("%d effects after redelivery, want %d", n, applied)
	}
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE attempts = 2`); n != bad {
		t.Fatalf("%d quarantine rows with 2 attempts, want %d", n, bad)
	}
}

func TestRedriveQuarantinedAfterFix(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	bad := ev(t, "Noted", 1, "a", 1, note{Origin: "o-a1", Fail: "permanent"})
	next := ev(t, "Noted", 1, "a", 2, note{Origin: "o-a2"})
	wantOutcomes(t, decide(t, ib, pool, raw(t, bad), raw(t, next)), "quarantined:bad_note", "deferred:version_gap")

	redrive := func(ib *inbox.Inbox, id uuid.UUID) ([]inbox.Decision, error) {
		var ds []inbox.Decision
		err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			var err error
			ds, err = ib.Redrive(t.Context(), tx, id)
			return err
		})
		return ds, err
	}
	// Today's handler still refuses it: quarantined again, same row.
	ds, err := redrive(ib, bad.EventID)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, ds, "quarantined:bad_note")
	if got := count(t, pool, `SELECT attempts FROM inbox_quarantine`); got != 2 {
		t.Fatalf("attempts %d, want 2", got)
	}
	// After the fix it applies, and wakes its successor.
	fixed, err := inbox.New(newRegistry(), handlers(false), inbox.Options{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ds, err = redrive(fixed, bad.EventID)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, ds, "applied", "applied+woken")
	if got := effectVersions(t, pool, "a"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("effects %v", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE state = 'redriven' AND redriven_at IS NOT NULL`); got != 1 {
		t.Fatalf("quarantine row not marked redriven")
	}
	// Asked again, the redrive is a harmless duplicate.
	ds, err = redrive(fixed, bad.EventID)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, ds, "duplicate")
	if _, err := redrive(fixed, uuid.Must(uuid.NewV7())); !errors.Is(err, inbox.ErrNotRetained) {
		t.Fatalf("redrive of an unknown event: %v, want ErrNotRetained", err)
	}
}

func TestRedriveUnsupportedSchemaWithNewDecoder(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	v2 := ev(t, "Noted", 2, "s", 1, note{Origin: "o-v2"})
	wantOutcomes(t, decide(t, ib, pool, raw(t, v2)), "quarantined:unsupported_schema")

	reg := newRegistry()
	envelope.Register[note](reg, "Noted", 2)
	upgraded, err := inbox.New(reg, handlers(true), inbox.Options{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var ds []inbox.Decision
	err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		ds, err = upgraded.Redrive(t.Context(), tx, v2.EventID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, ds, "applied")
	if got := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE state = 'redriven'`); got != 1 {
		t.Fatalf("not redriven")
	}
	st, err := upgraded.Stats(t.Context(), pool)
	if err != nil || st.Quarantined != 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

func TestTransientErrorsAreReturned(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	ctx := t.Context()
	decideErr := func(ib *inbox.Inbox, raws ...[]byte) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ib.Decide(ctx, tx, msgs(raws...))
			return err
		})
	}
	ok := raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: origin("ok")}))
	hiccup := raw(t, ev(t, "Noted", 1, "b", 1, note{Origin: origin("t"), Fail: "transient"}))
	err := decideErr(newInbox(t, inbox.Options{}), ok, hiccup)
	if !errors.Is(err, errTransient) {
		t.Fatalf("decide: %v, want the handler's transient error", err)
	}
	noticeErr := errors.New("outbox full (pretend)")
	ib := newInbox(t, inbox.Options{OnQuarantine: func(context.Context, pgx.Tx, inbox.Quarantined) error { return noticeErr }})
	if err := decideErr(ib, ok, []byte("garbage")); !errors.Is(err, noticeErr) {
		t.Fatalf("decide: %v, want the OnQuarantine error", err)
	}
	for _, table := range []string{"effect", "inbox_event", "inbox_deferred", "inbox_quarantine"} {
		if n := count(t, pool, `SELECT count(*) FROM `+table); n != 0 {
			t.Errorf("%d rows in %s after transient failures", n, table)
		}
	}
}

// beginCounter counts the transactions a pool's connections begin.
type beginCounter struct{ n atomic.Int64 }

func (c *beginCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.EqualFold(strings.TrimSpace(d.SQL), "begin") {
		c.n.Add(1)
	}
	return ctx
}

func (*beginCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A sweep decides its events a chunk to a transaction, not one each: on a
// loaded machine a commit per event made the one event whose missed wake
// held back a thousand others wait a minute behind them.
func TestSweepDecidesAChunkInOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	const n = 250
	var raws [][]byte
	for i := range n {
		raws = append(raws, raw(t, ev(t, "Noted", 1, fmt.Sprintf("u%d", i), 1,
			note{Origin: fmt.Sprintf("o-chunk-%d", i), Needs: "price/t1/api@9"})))
	}
	decide(t, ib, pool, raws...)
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != n {
		t.Fatalf("%d deferred, want %d", got, n)
	}
	// The fact arrives without an inbox event providing its key: no wake.
	if _, err := pool.Exec(ctx, `INSERT INTO fact (key) VALUES ('price/t1/api@9')`); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().Copy()
	var begins beginCounter
	cfg.ConnConfig.Tracer = &begins
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer traced.Close()
	applied, err := ib.Sweep(ctx, traced, 500)
	if err != nil || applied != n {
		t.Fatalf("sweep applied %d, %v; want %d", applied, err, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin LIKE 'o-chunk-%'`); got != n {
		t.Fatalf("%d effects, want %d", got, n)
	}
	if got, most := begins.n.Load(), int64((n+99)/100); got > most {
		t.Fatalf("the sweep of %d events began %d transactions, want at most %d", n, got, most)
	}
}

// An event failing within its retry budget does not hold up the others of
// its sweep chunk: they are decided one by one.
func TestSweepChunkWithAFailingEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, inbox.Options{})
	var raws [][]byte
	for i := range 5 {
		fail := ""
		if i == 2 {
			fail = "transient"
		}
		raws = append(raws, raw(t, ev(t, "Noted", 1, fmt.Sprintf("f%d", i), 1,
			note{Origin: fmt.Sprintf("o-fail-%d", i), Needs: "price/t1/api@8", Fail: fail})))
	}
	decide(t, ib, pool, raws...)
	if _, err := pool.Exec(ctx, `INSERT INTO fact (key) VALUES ('price/t1/api@8')`); err != nil {
		t.Fatal(err)
	}
	applied, err := ib.Sweep(ctx, pool, 500)
	if applied != 4 {
		t.Fatalf("sweep applied %d, %v; want the 4 that do not fail", applied, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 1 {
		t.Fatalf("%d left deferred, want the failing one", got)
	}
}

// A unique violation on a partition's copy of an origin constraint (a
// partitioned table's violation names the partition's constraint) is a
// DUPLICATE named after the origin constraint, at any depth of partitions;
// with the constraint not among the origin constraints, it is a permanent
// error named after the partition's.
func TestPartitionsOfAnOriginConstraint(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	if _, err := pool.Exec(t.Context(), `
		CREATE TABLE peffect (origin text NOT NULL, CONSTRAINT peffect_origin_key PRIMARY KEY (origin)) PARTITION BY RANGE (origin);
		CREATE TABLE peffect_am PARTITION OF peffect FOR VALUES FROM ('a') TO ('n') PARTITION BY RANGE (origin);
		CREATE TABLE peffect_af PARTITION OF peffect_am FOR VALUES FROM ('a') TO ('g');
		CREATE TABLE peffect_gm PARTITION OF peffect_am FOR VALUES FROM ('g') TO ('n');
		CREATE TABLE peffect_rest PARTITION OF peffect DEFAULT;`); err != nil {
		t.Fatal(err)
	}
	plain := map[string]inbox.Handler{
		"Noted": func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
			_, err := tx.Exec(ctx, `INSERT INTO peffect (origin) VALUES ($1)`, d.Payload.(note).Origin)
			return inbox.Outcome{}, err
		},
	}
	newPlain := func(origin ...string) *inbox.Inbox {
		ib, err := inbox.New(newRegistry(), plain, inbox.Options{OriginConstraints: origin})
		if err != nil {
			t.Fatal(err)
		}
		return ib
	}
	ib := newPlain("peffect_origin_key")
	apple := raw(t, ev(t, "Noted", 1, "apple", 1, note{Origin: "apple"}))
	zebra := raw(t, ev(t, "Noted", 1, "zebra", 1, note{Origin: "zebra"}))
	wantOutcomes(t, decide(t, ib, pool, apple, zebra), "applied", "applied")
	forget := func() {
		if _, err := pool.Exec(t.Context(), `DELETE FROM inbox_event`); err != nil {
			t.Fatal(err)
		}
	}
	forget()
	wantOutcomes(t, decide(t, ib, pool, apple, raw(t, ev(t, "Noted", 1, "kiwi", 1, note{Origin: "kiwi"})), zebra),
		"duplicate:effect_exists:peffect_origin_key", "applied", "duplicate:effect_exists:peffect_origin_key")
	forget()
	wantOutcomes(t, decide(t, newPlain("some_other_key"), pool, apple), "quarantined:integrity_violation:peffect_af_pkey")
	if got := count(t, pool, `SELECT count(*) FROM peffect`); got != 3 {
		t.Fatalf("%d effects, want 3", got)
	}
}
