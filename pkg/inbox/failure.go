package inbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/usagebilling/billing/pkg/envelope"
)

// How a failing handler is survived
//
// A handler's error is sorted by classify. DeferUntil, Permanent and
// Duplicate, and the database's integrity and data errors, decide the event
// (see Handler). What is left is either the infrastructure's (the database
// or the network is down, a deadlock, a cancelled context; see
// infrastructure), which is retried without limit and never quarantined, or
// unclassified: a bug, a dependency that refuses, a bad payload the handler
// does not name. An unclassified error is retried like a transient one, the
// whole batch again after the caller's backoff, but the inbox counts the
// event's failed attempts (in memory, per event id); the attempt that brings
// the count to Options.RetryBudget decides the event alone, and if it fails
// there again it is quarantined as ReasonRetriesExhausted with the error. An
// attempt that fails on the infrastructure is not counted, so an outage
// cannot exhaust a budget.
//
// The statement timeout (SQLSTATE 57014) is the event's, not the
// database's: a close too large for DB_STATEMENT_TIMEOUT fails the same way
// every time, and retried without limit it would hold its partition for
// ever. It is counted like an unclassified error, and the attempt that
// brings the count to the budget sets the event aside instead of
// quarantining it: DEFERRED as ReasonStatementTimeout on TimeoutKey, which
// nothing provides, so the sweep tries it again (backing off) while the
// partition moves on, and the operator sees it among the deferred.
//
// A handler that panics is recovered: its panic is its error, classified as
// handler_panic, which is decided like a Permanent error (the run rolled back
// to its savepoint, the event decided alone) and quarantined with the panic
// value and the stack. A panicking event is not given to its handler again by
// this inbox until it is decided: its recorded panic stands for the handler's
// result. A batch handler's panic names no item, so the group's events are
// decided one at a time and only the one that panics is quarantined.

// DefaultRetryBudget is Options.RetryBudget when unset.
const DefaultRetryBudget = 5

// maxDetail bounds the detail kept with a quarantined message (an error, a
// panic and its stack).
const maxDetail = 8 << 10

// maxTracked bounds the events whose failed attempts an inbox remembers; past
// it an arbitrary one is forgotten (and gets a fresh budget).
const maxTracked = 4096

// RetryError is the error Decide returns when a handler failed with an
// unclassified error on an attempt below its budget: the caller rolls back
// and tries again after a backoff, as for any error of Decide. Err is the
// handler's error.
type RetryError struct {
	EventID   uuid.UUID
	EventType string
	// Attempt is the number of failed attempts so far; the event is
	// quarantined when the attempt numbered Budget fails too.
	Attempt, Budget int
	Err             error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("apply %s %s (attempt %d of %d): %v", e.EventType, e.EventID, e.Attempt, e.Budget, e.Err)
}

func (e *RetryError) Unwrap() error { return e.Err }

// panicError is a handler's recovered panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panic: %v", e.value) }

// detail is the panic value and the stack, bounded.
func (e *panicError) detail() string {
	return bound(fmt.Sprintf("panic: %v\n\n%s", e.value, e.stack))
}

// callHandler calls h, recovering a panic as a *panicError.
func callHandler(ctx context.Context, tx pgx.Tx, h Handler, d *envelope.Decoded) (out Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return h(ctx, tx, d)
}

// callBatch calls h, recovering a panic as a *panicError.
func callBatch(ctx context.Context, tx pgx.Tx, h BatchHandler, ds []*envelope.Decoded) (outs []Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return h(ctx, tx, ds)
}

// infrastructure reports whether a handler's unclassified error comes from
// the database or the network rather than the handler: such an error is
// retried without counting against the event's budget.
func infrastructure(tx pgx.Tx, err error) bool {
	if tx.Conn().IsClosed() { // pgx closes a connection on a fatal error
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code[:2] {
		case "08", // connection exception
			"40", // transaction rollback: serialization failure, deadlock
			"53", // insufficient resources
			"57", // operator intervention: shutdown (the statement timeout, 57014, is the event's: classify)
			"58": // system error
			return true
		}
		return pg.Code == "55P03" // lock_not_available
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// bound cuts s to maxDetail bytes, on a rune boundary.
func bound(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	const mark = "\n... (cut)"
	cut := maxDetail - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// errorDetail is the detail kept for a handler's error.
func errorDetail(err error) string {
	if err == nil {
		return ""
	}
	return bound(strings.ToValidUTF8(err.Error(), "?"))
}

// attempts remembers, per event, the failed attempts of its handler and a
// panic, until the event is decided.
type attempts struct {
	n      atomic.Int64 // len(events), read without the lock on the healthy path
	mu     sync.Mutex
	events map[uuid.UUID]*attempt
}

type attempt struct {
	failed   int
	panicked *panicError
}

// tryAgain counts a failed attempt of id when it is below budget (again)
// and returns its number; the attempt numbered budget is not counted (the
// event is quarantined when it fails).
func (a *attempts) tryAgain(id uuid.UUID, budget int) (attempt int, again bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := a.entry(id)
	if at.failed+1 >= budget {
		return at.failed + 1, false
	}
	at.failed++
	return at.failed, true
}

// panic records the panic of id's handler; it reports whether it is new.
func (a *attempts) panic(id uuid.UUID, pe *panicError) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := a.entry(id)
	isNew := at.panicked != pe
	at.panicked = pe
	return isNew
}

// panicked returns the recorded panic of id's handler, or nil.
func (a *attempts) panicked(id uuid.UUID) *panicError {
	if a.n.Load() == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if at := a.events[id]; at != nil {
		return at.panicked
	}
	return nil
}

// forget drops what is remembered of the events decided in ds.
func (a *attempts) forget(ds []Decision) {
	if a.n.Load() == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range ds {
		delete(a.events, d.EventID)
	}
	a.n.Store(int64(len(a.events)))
}

func (a *attempts) entry(id uuid.UUID) *attempt {
	if a.events == nil {
		a.events = make(map[uuid.UUID]*attempt)
	}
	at := a.events[id]
	if at == nil {
		if len(a.events) >= maxTracked {
			for k := range a.events {
				delete(a.events, k)
				break
			}
		}
		at = &attempt{}
		a.events[id] = at
		a.n.Store(int64(len(a.events)))
	}
	return at
}
