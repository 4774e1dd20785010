package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The tests of consumers that survive bad handlers: a handler's panic
// quarantines its event as handler_panic, an unclassified error does once
// the event's retry budget is used up (retries_exhausted), a failure of the
// database does not use the budget up, and both quarantines are announced,
// listed and redriven like the others.

var errBug = errors.New("pretend bug: index out of range")

// faulty applies Noted like the test domain (one effect row, written first
// so that a failure after it proves it undone), but while broken is set a
// note whose Fail is "panic" panics and one whose Fail is "error" fails with
// an error the inbox cannot classify: a handler with a bug, which a deploy
// fixes (the test clears broken).
type faulty struct {
	broken atomic.Bool
	mu     sync.Mutex
	calls  map[string]int // by origin
	sizes  []int          // of the batch handler's calls
}

func newFaulty() *faulty {
	f := &faulty{calls: map[string]int{}}
	f.broken.Store(true)
	return f
}

func (f *faulty) called(origin string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[origin]
}

func (f *faulty) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sizes)
}

func (f *faulty) apply(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, n note) error {
	f.mu.Lock()
	f.calls[n.Origin]++
	f.mu.Unlock()
	e := d.Envelope
	if _, err := tx.Exec(ctx, `INSERT INTO effect (event_id, origin, aggregate, version) VALUES ($1, $2, $3, $4)`,
		e.EventID, n.Origin, e.AggregateID, e.AggregateVersion); err != nil {
		return fmt.Errorf("record note: %w", err)
	}
	if f.broken.Load() {
		switch n.Fail {
		case "panic":
			var m map[string]int
			//lint:ignore SA5000 the handler's deliberate bug: a runtime panic, as a real one would be
			m[n.Origin]++ // assignment to entry in nil map
		case "error":
			return errBug
		}
	}
	return nil
}

func (f *faulty) note(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, n note) (inbox.Outcome, error) {
	return inbox.Outcome{}, f.apply(ctx, tx, d, n)
}

func (f *faulty) notes(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, ns []note) ([]inbox.Outcome, error) {
	f.mu.Lock()
	f.sizes = append(f.sizes, len(ds))
	f.mu.Unlock()
	for i, d := range ds {
		if err := f.apply(ctx, tx, d, ns[i]); err != nil {
			return nil, inbox.ItemError(i, err)
		}
	}
	return make([]inbox.Outcome, len(ds)), nil
}

// inbox returns an inbox applying Noted with f (set-wise when batch), whose
// new quarantines are announced in the notice table (noticeTmpl), in the
// deciding transaction, as services announce EventQuarantined.
func (f *faulty) inbox(t *testing.T, batch bool, opts inbox.Options) *inbox.Inbox {
	t.Helper()
	opts.Service = "survive"
	opts.OnQuarantine = func(ctx context.Context, tx pgx.Tx, q inbox.Quarantined) error {
		_, err := tx.Exec(ctx, `INSERT INTO notice (event_id, reason, detail) VALUES ($1, $2, $3)`, q.EventID, q.Reason, q.Detail)
		return err
	}
	hs := map[string]inbox.Handler{"Noted": inbox.On(f.note)}
	if batch {
		hs = nil
		opts.BatchHandlers = map[string]inbox.BatchHandler{"Noted": inbox.OnBatch(f.notes)}
	}
	ib, err := inbox.New(newRegistry(), hs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

var noticeTmpl = pgtest.Template{
	Name: "inbox_with_notice",
	Migrate: func(ctx context.Context, databaseURL string) error {
		if err := tmpl.Migrate(ctx, databaseURL); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `CREATE TABLE notice (event_id uuid, reason text NOT NULL, detail text)`)
		return err
	},
}

// wantQuarantined checks that e is the only quarantined message, with
// reason, announced once, counted by ReadStats, its effect undone, and its
// detail holding each of details; it returns the detail.
func wantQuarantined(t *testing.T, pool *pgxpool.Pool, e envelope.Envelope, origin, reason string, details ...string) string {
	t.Helper()
	ms, err := inbox.ListQuarantine(t.Context(), pool, inbox.QuarantineFilter{Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].EventID != e.EventID {
		t.Fatalf("quarantined as %s: %+v, want only %s", reason, ms, e.EventID)
	}
	for _, d := range details {
		if !strings.Contains(ms[0].Detail, d) {
			t.Errorf("quarantine detail does not hold %q:\n%s", d, ms[0].Detail)
		}
	}
	if len(ms[0].Detail) > 8<<10 {
		t.Errorf("quarantine detail of %d bytes, want at most 8 KiB", len(ms[0].Detail))
	}
	if st, err := inbox.ReadStats(t.Context(), pool); err != nil || st.Quarantined != 1 {
		t.Errorf("stats %+v, %v; want 1 quarantined", st, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM notice WHERE event_id = $1 AND reason = $2 AND detail = $3`,
		e.EventID, reason, ms[0].Detail); n != 1 {
		t.Errorf("%d quarantine notices of %s with its detail, want 1", n, e.EventID)
	}
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE origin = $1`, origin); n != 0 {
		t.Errorf("the failing handler's effect was kept (%d rows)", n)
	}
	return ms[0].Detail
}

// redriveAfterFix fixes f's handler and redrives e: it is applied, once, and
// its quarantine row is marked redriven.
func redriveAfterFix(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, f *faulty, e envelope.Envelope, origin string) {
	t.Helper()
	// Still broken: quarantined again (the same row, one more attempt),
	// after the budget's retries for an unclassified error.
	for attempt := 1; ; attempt++ {
		ds, err := redriveErr(t, ib, pool, e.EventID)
		var retry *inbox.RetryError
		if errors.As(err, &retry) && attempt < 10 {
			continue
		}
		if err != nil {
			t.Fatalf("redrive before the fix: %v", err)
		}
		if ds[0].Outcome != inbox.OutcomeQuarantined {
			t.Fatalf("redrive before the fix: %v, want quarantined", outcomes(ds))
		}
		break
	}
	f.broken.Store(false)
	wantOutcomes(t, redrive(t, ib, pool, e.EventID), "applied")
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE origin = $1`, origin); n != 1 {
		t.Fatalf("%d effects of the redriven event, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE state = 'redriven' AND attempts = 2`); n != 1 {
		t.Fatal("the quarantine row is not marked redriven after two attempts")
	}
}

func redrive(t *testing.T, ib *inbox.Inbox, pool *pgxpool.Pool, id uuid.UUID) []inbox.Decision {
	t.Helper()
	ds, err := redriveErr(t, ib, pool, id)
	if err != nil {
		t.Fatalf("redrive %s: %v", id, err)
	}
	return ds
}

func redriveErr(t *testing.T, ib *inbox.Inbox, pool *pgxpool.Pool, id uuid.UUID) ([]inbox.Decision, error) {
	t.Helper()
	var ds []inbox.Decision
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		ds, err = ib.Redrive(t.Context(), tx, id)
		return err
	})
	return ds, err
}

// TestRunnerQuarantinesPanickingHandler: a handler that panics does not stop
// the consumer; its event is quarantined with the stack, the events behind
// it are applied and their offsets committed, and a redrive after the fix
// applies it.
func TestRunnerQuarantinesPanickingHandler(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, noticeTmpl)
	f := newFaulty()
	ib := f.inbox(t, false, inbox.Options{})
	bad := note{Origin: origin("bad"), Fail: "panic"}
	badEv := ev(t, "Noted", 1, "p", 1, bad)
	produce(t, brokers, topic,
		raw(t, ev(t, "Noted", 1, "h", 1, note{Origin: origin("ok")})),
		raw(t, badEv),
		raw(t, ev(t, "Noted", 1, "h", 2, note{Origin: origin("ok")})))
	group := "inbox-" + topic
	rr := startRunner(t, pool, ib, brokers, group, topic, nil)
	eventually(t, "healthy events applied", 30*time.Second, func() bool {
		return len(effectVersions(t, pool, "h")) == 2
	})
	eventually(t, "offsets committed past the panicking event", 30*time.Second, func() bool {
		return committed(t, brokers, group, topic) == 3
	})
	rr.stop(t)
	wantQuarantined(t, pool, badEv, bad.Origin, inbox.ReasonHandlerPanic,
		"panic: assignment to entry in nil map", "goroutine ", "(*faulty).apply")
	redriveAfterFix(t, pool, ib, f, badEv, bad.Origin)
}

// TestBatchHandlerPanicQuarantinesOnlyItsEvent: a batch handler's panic names
// no event, so the group is decided again one event at a time: only the one
// that panics is quarantined, the others are applied; through Decide (where
// the calls show the fallback) and through a Runner.
func TestBatchHandlerPanicQuarantinesOnlyItsEvent(t *testing.T) {
	t.Parallel()
	t.Run("decide", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, noticeTmpl)
		f := newFaulty()
		ib := f.inbox(t, true, inbox.Options{})
		bad := note{Origin: origin("bad"), Fail: "panic"}
		raws, _ := notes(t, 6, map[int]note{3: bad})
		want := repeat("applied", 6)
		want[3] = "quarantined:handler_panic"
		wantOutcomes(t, decide(t, ib, pool, raws...), want...)
		// The group of 6 panics; its events alone until the culprit; the
		// two after it as a group again.
		if got := f.batchSizes(); !slices.Equal(got, []int{6, 1, 1, 1, 1, 2}) {
			t.Fatalf("batch handler calls of sizes %v, want [6 1 1 1 1 2]", got)
		}
		if n := count(t, pool, `SELECT count(*) FROM effect`); n != 5 {
			t.Fatalf("%d effects, want 5", n)
		}
		d, err := newRegistry().Decode(raws[3])
		if err != nil {
			t.Fatal(err)
		}
		wantQuarantined(t, pool, d.Envelope, bad.Origin, inbox.ReasonHandlerPanic, "goroutine ", "(*faulty).notes")
		redriveAfterFix(t, pool, ib, f, d.Envelope, bad.Origin)
	})
	t.Run("runner", func(t *testing.T) {
		t.Parallel()
		brokers := kafkatest.Brokers(t)
		topic := kafkatest.Topic(t, brokers, 1)
		pool := pgtest.NewPool(t, noticeTmpl)
		f := newFaulty()
		ib := f.inbox(t, true, inbox.Options{})
		bad := note{Origin: origin("bad"), Fail: "panic"}
		raws, _ := notes(t, 8, map[int]note{5: bad})
		produce(t, brokers, topic, raws...)
		group := "inbox-" + topic
		rr := startRunner(t, pool, ib, brokers, group, topic, nil)
		eventually(t, "healthy events applied", 30*time.Second, func() bool {
			return count(t, pool, `SELECT count(*) FROM effect`) == 7
		})
		eventually(t, "offsets committed past the panicking event", 30*time.Second, func() bool {
			return committed(t, brokers, group, topic) == 8
		})
		rr.stop(t)
		d, err := newRegistry().Decode(raws[5])
		if err != nil {
			t.Fatal(err)
		}
		wantQuarantined(t, pool, d.Envelope, bad.Origin, inbox.ReasonHandlerPanic, "goroutine ")
	})
}

// TestRunnerRetriesUnclassifiedErrorUpToBudget: an error that is neither the
// handler's verdict nor the database's is retried, the same batch after a
// backoff, until the event's budget is used up; then the event is
// quarantined with the error and the partition moves on.
func TestRunnerRetriesUnclassifiedErrorUpToBudget(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, noticeTmpl)
	f := newFaulty()
	const budget = 3
	ib := f.inbox(t, false, inbox.Options{RetryBudget: budget})
	bad := note{Origin: origin("bad"), Fail: "error"}
	badEv := ev(t, "Noted", 1, "e", 1, bad)
	produce(t, brokers, topic,
		raw(t, ev(t, "Noted", 1, "h", 1, note{Origin: origin("ok")})),
		raw(t, badEv),
		raw(t, ev(t, "Noted", 1, "h", 2, note{Origin: origin("ok")})))
	group := "inbox-" + topic
	rr := startRunner(t, pool, ib, brokers, group, topic, nil)
	eventually(t, "events behind the failing one applied", 30*time.Second, func() bool {
		return len(effectVersions(t, pool, "h")) == 2
	})
	eventually(t, "offsets committed past the failing event", 30*time.Second, func() bool {
		return committed(t, brokers, group, topic) == 3
	})
	rr.stop(t)
	// budget attempts, the last one repeated alone to decide it.
	if n := f.called(bad.Origin); n < budget || n > budget+1 {
		t.Fatalf("the failing handler was called %d times, want %d or %d", n, budget, budget+1)
	}
	wantQuarantined(t, pool, badEv, bad.Origin, inbox.ReasonRetriesExhausted, errBug.Error())
	redriveAfterFix(t, pool, ib, f, badEv, bad.Origin)
}

// TestDatabaseOutageDoesNotUseUpBudget: while the server ends the handler's
// session on every attempt (as it ends every session when it shuts down), the
// event is retried without limit and not counted. So when the outage is over
// and the handler fails twice more with an unclassified error, the first is
// the event's first counted attempt (of 2), the second the last, decided
// alone by a third call, which applies it. Had the outage been counted, the
// first would have been the last attempt and the second, alone, would have
// quarantined the event.
func TestDatabaseOutageDoesNotUseUpBudget(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, noticeTmpl)
	const budget = 2
	var phase atomic.Int32 // 0: outage, 1: two unclassified failures, 2: healthy
	var outageCalls, bugCalls atomic.Int32
	h := func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, n note) (inbox.Outcome, error) {
		switch phase.Load() {
		case 0:
			outageCalls.Add(1)
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return inbox.Outcome{}, fmt.Errorf("record note: %w", err)
		case 1:
			if bugCalls.Add(1) == 2 {
				phase.Store(2)
			}
			return inbox.Outcome{}, errBug
		}
		_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, origin, aggregate, version) VALUES ($1, $2, $3, $4)`,
			d.Envelope.EventID, n.Origin, d.Envelope.AggregateID, d.Envelope.AggregateVersion)
		return inbox.Outcome{}, err
	}
	ib, err := inbox.New(newRegistry(), map[string]inbox.Handler{"Noted": inbox.On(h)},
		inbox.Options{Service: "outage", RetryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, topic, raw(t, ev(t, "Noted", 1, "o", 1, note{Origin: "o-1"})))
	group := "inbox-" + topic
	rr := startRunner(t, pool, ib, brokers, group, topic, nil)
	eventually(t, "attempts failing on the database, well past the budget", 30*time.Second, func() bool {
		return outageCalls.Load() >= 3*budget
	})
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine`); n != 0 {
		t.Fatalf("%d messages quarantined during the outage", n)
	}
	phase.Store(1)
	eventually(t, "event decided after the outage", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-1'`)+
			count(t, pool, `SELECT count(*) FROM inbox_quarantine`) > 0
	})
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine`); n != 0 {
		t.Fatalf("%d messages quarantined: the outage used the budget up", n)
	}
	eventually(t, "offset committed", 30*time.Second, func() bool {
		return committed(t, brokers, group, topic) == 1
	})
	rr.stop(t)
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'o-1'`); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// TestTypedRegistrationMismatch: On and OnBatch check the payload type once;
// an event whose payload is not the registered type (here a schema version
// decoded to another type) is quarantined as unexpected_payload without
// calling the handler, and in a batch only that event.
func TestTypedRegistrationMismatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	reg := newRegistry()
	envelope.Register[fact](reg, "Noted", 2) // a version the handlers do not expect
	envelope.Register[fact](reg, "Typed", 1)
	var batchCalls [][]string
	ib, err := inbox.New(reg, map[string]inbox.Handler{
		"Typed": inbox.On(func(context.Context, pgx.Tx, *envelope.Decoded, note) (inbox.Outcome, error) {
			t.Error("handler called with a payload of another type")
			return inbox.Outcome{}, nil
		}),
	}, inbox.Options{Service: "typed", BatchHandlers: map[string]inbox.BatchHandler{
		"Noted": inbox.OnBatch(func(_ context.Context, _ pgx.Tx, _ []*envelope.Decoded, ns []note) ([]inbox.Outcome, error) {
			var origins []string
			for _, n := range ns {
				origins = append(origins, n.Origin)
			}
			batchCalls = append(batchCalls, origins)
			return make([]inbox.Outcome, len(ns)), nil
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, decide(t, ib, pool,
		raw(t, ev(t, "Typed", 1, "t", 1, fact{Key: "k"})),
		raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: "o-a"})),
		raw(t, ev(t, "Noted", 2, "b", 1, fact{Key: "k"})),
		raw(t, ev(t, "Noted", 1, "c", 1, note{Origin: "o-c"})),
	), "quarantined:unexpected_payload", "applied", "quarantined:unexpected_payload", "applied")
	ms, err := inbox.ListQuarantine(t.Context(), pool, inbox.QuarantineFilter{Reason: inbox.ReasonUnexpectedPayload})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || !strings.Contains(ms[0].Detail, "payload is inbox_test.fact, want inbox_test.note") {
		t.Fatalf("quarantined %+v, want 2 with the types in the detail", ms)
	}
	for _, origins := range batchCalls {
		if slices.Contains(origins, "") {
			t.Fatalf("batch handler given a payload of another type: calls %q", batchCalls)
		}
	}
}

// TestPanicDetailIsBounded: a panic value of any size is kept cut to 8 KiB,
// still valid UTF-8, in the quarantine row and its announcement.
func TestPanicDetailIsBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, noticeTmpl)
	huge := strings.Repeat("é", 20<<10) // 40 KiB of two-byte runes
	ib, err := inbox.New(newRegistry(), map[string]inbox.Handler{
		"Noted": inbox.On(func(context.Context, pgx.Tx, *envelope.Decoded, note) (inbox.Outcome, error) {
			panic(huge)
		}),
	}, inbox.Options{Service: "bounded", OnQuarantine: func(ctx context.Context, tx pgx.Tx, q inbox.Quarantined) error {
		_, err := tx.Exec(ctx, `INSERT INTO notice (event_id, reason, detail) VALUES ($1, $2, $3)`, q.EventID, q.Reason, q.Detail)
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := ev(t, "Noted", 1, "b", 1, note{Origin: origin("huge")})
	wantOutcomes(t, decide(t, ib, pool, raw(t, e)), "quarantined:handler_panic")
	detail := wantQuarantined(t, pool, e, "", inbox.ReasonHandlerPanic, "panic: éé")
	if len(detail) < 8<<10-64 || !strings.HasSuffix(detail, "(cut)") || !utf8.ValidString(detail) {
		t.Fatalf("detail of %d bytes ending %q, want cut near 8 KiB, valid UTF-8", len(detail), detail[len(detail)-16:])
	}
}

// TestStatementTimeoutSetsTheEventAside: an event whose handler runs past
// the statement timeout on every attempt does not hold its partition for
// ever: after its budget it is deferred aside (statement_timeout, never
// quarantined), the events behind it are applied and the offset moves on;
// once its work fits again, the sweep applies it.
func TestStatementTimeoutSetsTheEventAside(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	pool := pgtest.NewPool(t, noticeTmpl)
	const budget = 2
	var slow atomic.Bool
	slow.Store(true)
	var slowCalls atomic.Int32
	h := func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, n note) (inbox.Outcome, error) {
		if n.Fail == "slow" && slow.Load() {
			slowCalls.Add(1)
			if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '50ms'`); err != nil {
				return inbox.Outcome{}, err
			}
			_, err := tx.Exec(ctx, `SELECT pg_sleep(2)`)
			return inbox.Outcome{}, fmt.Errorf("a close too large for the timeout: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, origin, aggregate, version) VALUES ($1, $2, $3, $4)`,
			d.Envelope.EventID, n.Origin, d.Envelope.AggregateID, d.Envelope.AggregateVersion)
		return inbox.Outcome{}, err
	}
	ib, err := inbox.New(newRegistry(), map[string]inbox.Handler{"Noted": inbox.On(h)},
		inbox.Options{Service: "timeout", RetryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	bad := ev(t, "Noted", 1, "big", 1, note{Origin: "big-1", Fail: "slow"})
	produce(t, brokers, topic, raw(t, ev(t, "Noted", 1, "h", 1, note{Origin: "h-1"})), raw(t, bad),
		raw(t, ev(t, "Noted", 1, "h", 2, note{Origin: "h-2"})))
	group := "inbox-" + topic
	rr := startRunner(t, pool, ib, brokers, group, topic, nil)
	eventually(t, "the events behind the slow one applied", 30*time.Second, func() bool {
		return len(effectVersions(t, pool, "h")) == 2
	})
	eventually(t, "offsets committed past the slow event", 30*time.Second, func() bool {
		return committed(t, brokers, group, topic) == 3
	})
	rr.stop(t)
	if n := count(t, pool, `SELECT count(*) FROM inbox_deferred WHERE event_id = $1 AND reason = $2 AND wait_key = $3`,
		bad.EventID, inbox.ReasonStatementTimeout, inbox.TimeoutKey(bad.EventID)); n != 1 {
		t.Fatalf("the slow event is not set aside as statement_timeout (%d rows)", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine`); n != 0 {
		t.Fatalf("%d messages quarantined for a timeout", n)
	}
	if n := slowCalls.Load(); n < budget {
		t.Fatalf("the slow handler ran %d times, want at least the budget %d", n, budget)
	}
	slow.Store(false)
	if _, err := pool.Exec(t.Context(), `UPDATE inbox_deferred SET next_attempt = now()`); err != nil {
		t.Fatal(err)
	}
	if n, err := ib.Sweep(t.Context(), pool, 10); err != nil || n != 1 {
		t.Fatalf("sweep applied %d, %v; want the slow event", n, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE origin = 'big-1'`); n != 1 {
		t.Fatalf("%d effects of the slow event, want 1", n)
	}
}
