package inbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// batchNotes applies Noted set-wise like the test domain's handler: one
// INSERT of every effect, then one lookup of the facts the notes need; each
// note's failure (Needs missing, Fail) is reported for the first failing
// item, in order. Each applied note publishes an echo on "echo.a". It
// records the size of every call.
type batchNotes struct {
	mu    sync.Mutex
	calls []int
	// transientOnce makes the first note with Fail "transient" fail once.
	transientOnce bool
	failedOnce    bool
	// onConflict skips notes whose effect exists (ON CONFLICT DO NOTHING)
	// and reports them as inbox.Duplicate rather than raising the unique
	// violation.
	onConflict bool
	// wait reports a note whose fact is missing by its Outcome's Wait,
	// writing nothing for it, instead of by an ItemError.
	wait bool
	// waitAndPublish makes such a note also publish (a handler's bug).
	waitAndPublish bool
	t              testing.TB
}

func (b *batchNotes) sizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

func (b *batchNotes) handle(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded) ([]inbox.Outcome, error) {
	b.mu.Lock()
	b.calls = append(b.calls, len(ds))
	b.mu.Unlock()
	n := len(ds)
	ids := make([]uuid.UUID, n)
	origins := make([]string, n)
	aggs := make([]string, n)
	versions := make([]int64, n)
	needs := make([]string, n)
	for i, d := range ds {
		nt := d.Payload.(note)
		ids[i], origins[i], aggs[i], versions[i], needs[i] = d.Envelope.EventID, nt.Origin, d.Envelope.AggregateID, d.Envelope.AggregateVersion, nt.Needs
	}
	have := map[string]bool{}
	rows, err := tx.Query(ctx, `SELECT k FROM unnest($1::text[]) AS k WHERE EXISTS (SELECT 1 FROM fact f WHERE f.key = k)`, needs)
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		have[k] = true
	}
	missing := func(i int) bool { return needs[i] != "" && !have[needs[i]] }
	write := make([]bool, n) // in wait mode, nothing is written for a waiting note
	for i := range write {
		write[i] = !b.wait || !missing(i)
	}
	conflict := ""
	if b.onConflict {
		conflict = "ON CONFLICT (origin) DO NOTHING"
	}
	rows, err = tx.Query(ctx, `
		INSERT INTO effect (event_id, origin, aggregate, version)
		SELECT u.event_id, u.origin, u.aggregate, u.version
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::boolean[])
		     WITH ORDINALITY AS u(event_id, origin, aggregate, version, write, n)
		WHERE u.write
		ORDER BY u.n
		`+conflict+`
		RETURNING origin`, ids, origins, aggs, versions, write)
	if err != nil {
		return nil, err
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	outs := make([]inbox.Outcome, n)
	for i, d := range ds {
		nt := d.Payload.(note)
		if b.wait && missing(i) {
			outs[i] = inbox.Outcome{Wait: nt.Needs}
			if b.waitAndPublish {
				outs[i].Publish = []inbox.Publication{{Topic: "echo.a", Event: ev(b.t, "Noted", 1, "bug", 1, note{Origin: "bug"})}}
			}
			continue
		}
		if b.onConflict && !slices.Contains(stored, nt.Origin) {
			return nil, inbox.ItemError(i, inbox.Duplicate("effect_origin_key"))
		}
		if missing(i) {
			return nil, inbox.ItemError(i, inbox.DeferUntil(nt.Needs))
		}
		if nt.Fail == "transient" {
			b.mu.Lock()
			first := !b.failedOnce
			b.failedOnce = true
			b.mu.Unlock()
			if !b.transientOnce || first {
				return nil, inbox.ItemError(i, errTransient)
			}
		}
		if nt.Fail == "permanent" {
			return nil, inbox.ItemError(i, inbox.Permanent("bad_note", errors.New("told to fail")))
		}
		echo := ev(b.t, "Noted", 1, "echo-"+d.Envelope.EventID.String(), 1, note{Origin: "echo-" + nt.Origin})
		outs[i] = inbox.Outcome{Publish: []inbox.Publication{{Topic: "echo.a", Event: echo}}}
	}
	return outs, nil
}

// batchInbox handles Noted with b and FactProvided with the test handler.
func batchInbox(t *testing.T, b *batchNotes) *inbox.Inbox {
	t.Helper()
	b.t = t
	hs := handlers(true)
	delete(hs, "Noted")
	ib, err := inbox.New(newRegistry(), hs, inbox.Options{
		Service:           "batch",
		BatchHandlers:     map[string]inbox.BatchHandler{"Noted": b.handle},
		OriginConstraints: []string{"effect_origin_key"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// published returns the origins echoed in the outbox, in order.
func publishedOrigins(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT convert_from(envelope, 'UTF8')::jsonb->'payload'->>'origin' FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func notes(t *testing.T, n int, special map[int]note) (raws [][]byte, origins []string) {
	t.Helper()
	for i := range n {
		nt, ok := special[i]
		if !ok {
			nt = note{Origin: origin("n")}
		}
		raws = append(raws, raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, nt)))
		origins = append(origins, nt.Origin)
	}
	return raws, origins
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func echoes(origins ...string) []string {
	out := make([]string, len(origins))
	for i, o := range origins {
		out[i] = "echo-" + o
	}
	return out
}

func wantCalls(t *testing.T, b *batchNotes, want ...int) {
	t.Helper()
	if got := b.sizes(); !slices.Equal(got, want) {
		t.Fatalf("batch handler calls of sizes %v, want %v", got, want)
	}
}

func TestBatchHandlerAndHandlerRefused(t *testing.T) {
	t.Parallel()
	b := &batchNotes{}
	_, err := inbox.New(newRegistry(), handlers(true), inbox.Options{
		BatchHandlers: map[string]inbox.BatchHandler{"Noted": b.handle},
	})
	if err == nil {
		t.Fatal("an event type with a handler and a batch handler was accepted")
	}
}

// TestBatchOneCallPerRun: a run of fresh events is one call; the outcomes
// are applied in order (the publications are in the batch's order), and a
// redelivery calls nothing.
func TestBatchOneCallPerRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	b := &batchNotes{}
	ib := batchInbox(t, b)
	raws, origins := notes(t, 40, nil)
	wantOutcomes(t, decide(t, ib, pool, raws...), repeat("applied", 40)...)
	wantCalls(t, b, 40)
	if got := publishedOrigins(t, pool); !slices.Equal(got, echoes(origins...)) {
		t.Fatalf("published %q, want %q", got, echoes(origins...))
	}
	wantOutcomes(t, decide(t, ib, pool, raws...), repeat("duplicate", 40)...)
	wantCalls(t, b, 40)
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 40 {
		t.Fatalf("%d effects, want 40", got)
	}
}

// TestBatchPermanentItem: a permanent error of one item quarantines exactly
// it; the items before it are applied in one call again, the ones after it
// in another.
func TestBatchPermanentItem(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	b := &batchNotes{}
	ib := batchInbox(t, b)
	bad := note{Origin: origin("bad"), Fail: "permanent"}
	raws, origins := notes(t, 10, map[int]note{4: bad})
	want := repeat("applied", 10)
	want[4] = "quarantined:bad_note"
	wantOutcomes(t, decide(t, ib, pool, raws...), want...)
	wantCalls(t, b, 10, 4, 1, 5)
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 9 {
		t.Fatalf("%d effects, want 9", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect WHERE origin = $1`, bad.Origin); got != 0 {
		t.Fatal("the quarantined note's effect is there")
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE reason = 'bad_note'`); got != 1 {
		t.Fatalf("%d quarantined, want 1", got)
	}
	wantEchoes := echoes(slices.Delete(slices.Clone(origins), 4, 5)...)
	if got := publishedOrigins(t, pool); !slices.Equal(got, wantEchoes) {
		t.Fatalf("published %q, want %q", got, wantEchoes)
	}
}

// TestBatchDeferredItem: an item waiting for a fact is deferred alone, and
// applied (alone) when the fact arrives, woken or swept.
func TestBatchDeferredItem(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	b := &batchNotes{}
	ib := batchInbox(t, b)
	waiting := note{Origin: origin("wait"), Needs: "price/t1/api@1"}
	swept := note{Origin: origin("swept"), Needs: "price/t1/api@2"}
	raws, _ := notes(t, 8, map[int]note{2: waiting, 6: swept})
	want := repeat("applied", 8)
	want[2], want[6] = "deferred:missing_fact", "deferred:missing_fact"
	wantOutcomes(t, decide(t, ib, pool, raws...), want...)
	// 8 fails at 2; 2 applied; 2 deferred alone; 5 fails at 3 (item 6);
	// 3 applied; 6 deferred alone; 1 applied.
	wantCalls(t, b, 8, 2, 1, 5, 3, 1, 1)
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 6 {
		t.Fatalf("%d effects, want 6", got)
	}
	price := raw(t, ev(t, "FactProvided", 1, "p", 1, fact{Key: "price/t1/api@1"}))
	wantOutcomes(t, decide(t, ib, pool, price), "applied", "applied+woken")
	// The other fact arrives without an event: the sweep applies it.
	if _, err := pool.Exec(t.Context(), `INSERT INTO fact (key) VALUES ('price/t1/api@2');
		UPDATE inbox_deferred SET next_attempt = now()`); err != nil {
		t.Fatal(err)
	}
	if n, err := ib.Sweep(t.Context(), pool, 10); err != nil || n != 1 {
		t.Fatalf("sweep applied %d, %v; want 1", n, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 8 {
		t.Fatalf("%d effects, want 8", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 0 {
		t.Fatalf("%d deferred left", got)
	}
	if got := len(publishedOrigins(t, pool)); got != 8 {
		t.Fatalf("%d published, want 8", got)
	}
}

// TestBatchWaitingItems: items reported waiting by their outcome are
// deferred without undoing the call: one call decides all eight, and the
// waiting items are applied when their facts arrive, woken or swept.
func TestBatchWaitingItems(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	b := &batchNotes{wait: true}
	ib := batchInbox(t, b)
	waiting := note{Origin: origin("wait"), Needs: "price/t1/api@1"}
	swept := note{Origin: origin("swept"), Needs: "price/t1/api@2"}
	raws, origins := notes(t, 8, map[int]note{2: waiting, 6: swept})
	want := repeat("applied", 8)
	want[2], want[6] = "deferred:missing_fact", "deferred:missing_fact"
	wantOutcomes(t, decide(t, ib, pool, raws...), want...)
	wantCalls(t, b, 8)
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 6 {
		t.Fatalf("%d effects, want 6", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_event`); got != 6 {
		t.Fatalf("%d inbox events, want 6 (the waiting items are not claimed)", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred WHERE wait_key = ANY($1)`,
		[]string{waiting.Needs, swept.Needs}); got != 2 {
		t.Fatalf("%d deferred on their keys, want 2", got)
	}
	applied := slices.Delete(slices.Delete(slices.Clone(origins), 6, 7), 2, 3)
	if got := publishedOrigins(t, pool); !slices.Equal(got, echoes(applied...)) {
		t.Fatalf("published %q, want %q", got, echoes(applied...))
	}
	price := raw(t, ev(t, "FactProvided", 1, "p", 1, fact{Key: "price/t1/api@1"}))
	wantOutcomes(t, decide(t, ib, pool, price), "applied", "applied+woken")
	if _, err := pool.Exec(t.Context(), `INSERT INTO fact (key) VALUES ('price/t1/api@2');
		UPDATE inbox_deferred SET next_attempt = now()`); err != nil {
		t.Fatal(err)
	}
	if n, err := ib.Sweep(t.Context(), pool, 10); err != nil || n != 1 {
		t.Fatalf("sweep applied %d, %v; want 1", n, err)
	}
	wantCalls(t, b, 8, 1, 1)
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 8 {
		t.Fatalf("%d effects, want 8", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 0 {
		t.Fatalf("%d deferred left", got)
	}
}

// TestBatchWaitingItemThatPublishes: an outcome that waits yet publishes is
// a handler's bug, retried within the item's budget like any unclassified
// error: nothing of the call is kept.
func TestBatchWaitingItemThatPublishes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	b := &batchNotes{wait: true, waitAndPublish: true}
	ib := batchInbox(t, b)
	raws, _ := notes(t, 3, map[int]note{1: {Origin: origin("wait"), Needs: "price/t1/api@9"}})
	ctx := t.Context()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ib.Decide(ctx, tx, msgs(raws...))
		return err
	})
	var retry *inbox.RetryError
	if !errors.As(err, &retry) {
		t.Fatalf("decide returned %v, want a RetryError", err)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect`) + count(t, pool, `SELECT count(*) FROM inbox_deferred`); got != 0 {
		t.Fatalf("%d rows left by a refused outcome", got)
	}
}

// TestBatchUniqueViolation: the set statement raises a unique violation for
// an effect that exists without its inbox row (a redelivery after the inbox
// row was removed): the items are decided alone until the culprit, which is
// the one DUPLICATE; the rest go back to one call.
func TestBatchUniqueViolation(t *testing.T) {
	t.Parallel()
	for _, onConflict := range []bool{false, true} {
		name := "raised"
		if onConflict {
			name = "on_conflict"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t, inboxOutboxTmpl)
			b := &batchNotes{onConflict: onConflict}
			ib := batchInbox(t, b)
			raws, origins := notes(t, 7, nil)
			if _, err := pool.Exec(t.Context(), `INSERT INTO effect (event_id, origin, aggregate, version)
				VALUES (gen_random_uuid(), $1, 'old', 1)`, origins[2]); err != nil {
				t.Fatal(err)
			}
			want := repeat("applied", 7)
			want[2] = "duplicate:effect_exists:effect_origin_key"
			wantOutcomes(t, decide(t, ib, pool, raws...), want...)
			if onConflict {
				wantCalls(t, b, 7, 2, 1, 4) // named: as a permanent item
			} else {
				wantCalls(t, b, 7, 1, 1, 1, 4) // alone until the culprit
			}
			if got := count(t, pool, `SELECT count(*) FROM effect`); got != 7 {
				t.Fatalf("%d effects, want 7", got)
			}
			if got := count(t, pool, `SELECT count(*) FROM inbox_event`); got != 7 {
				t.Fatalf("%d inbox events, want 7 (the duplicate keeps its key)", got)
			}
			wantEchoes := echoes(slices.Delete(slices.Clone(origins), 2, 3)...)
			if got := publishedOrigins(t, pool); !slices.Equal(got, wantEchoes) {
				t.Fatalf("published %q, want %q", got, wantEchoes)
			}
		})
	}
}

// TestBatchTransientRetriesAll: a transient item error fails the whole
// batch, which commits nothing; tried again, it applies in one call.
func TestBatchTransientRetriesAll(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	b := &batchNotes{transientOnce: true}
	ib := batchInbox(t, b)
	raws, _ := notes(t, 6, map[int]note{3: {Origin: origin("flaky"), Fail: "transient"}})
	ctx := t.Context()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ib.Decide(ctx, tx, msgs(raws...))
		return err
	})
	if !errors.Is(err, errTransient) {
		t.Fatalf("decide returned %v, want the transient error", err)
	}
	if got := count(t, pool, `SELECT count(*) FROM effect`) + count(t, pool, `SELECT count(*) FROM inbox_event`); got != 0 {
		t.Fatalf("%d rows left by a failed batch", got)
	}
	wantOutcomes(t, decide(t, ib, pool, raws...), repeat("applied", 6)...)
	wantCalls(t, b, 6, 6)
	if got := count(t, pool, `SELECT count(*) FROM effect`); got != 6 {
		t.Fatalf("%d effects, want 6", got)
	}
}

// TestBatchMixedVersions: versions after the first of an aggregate end a
// group and come alone, after their predecessor, in order; a version that
// comes before its predecessor is deferred and woken by it.
func TestBatchMixedVersions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	b := &batchNotes{}
	ib := batchInbox(t, b)
	n := func(agg string, v int64) []byte {
		return raw(t, ev(t, "Noted", 1, agg, v, note{Origin: origin(agg)}))
	}
	ds := decide(t, ib, pool, n("a", 1), n("b", 1), n("a", 2), n("c", 1), n("d", 1), n("a", 3), n("e", 2), n("e", 1))
	wantOutcomes(t, ds, "applied", "applied", "applied", "applied", "applied", "applied",
		"deferred:version_gap", "applied", "applied+woken")
	// [a1 b1] [a2] [c1 d1] [a3] (e2 deferred) [e1], then e2 woken.
	wantCalls(t, b, 2, 1, 2, 1, 1, 1)
	if got := effectVersions(t, pool, "a"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("a applied in order %v", got)
	}
	if got := effectVersions(t, pool, "e"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("e applied in order %v", got)
	}
}
