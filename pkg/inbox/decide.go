package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/tracing"
)

// How a batch is decided
//
// A batch is cut into runs: the longest stretches in which no event id and no
// aggregate version repeats. A run is decided under one savepoint in two
// round trips besides the handlers' own statements:
//
//  1. SAVEPOINT; claim every decodable event in inbox_event (INSERT ...
//     RETURNING, with ON CONFLICT DO NOTHING only where keys were met
//     lately: see "The first claim") and, in the same statement, read the
//     digests of the events it did not claim and the other holders of the
//     events' aggregate slots; read the aggregate versions preceding the
//     run's events, and the run's events already deferred. (An event whose
//     concurrent delivery committed while the claim waited is read again in
//     a round trip of its own: readUnseen.)
//  2. Walk the run in order, in memory: duplicates, conflicts and version gaps
//     are decided from what step 1 read (a predecessor claimed in this run
//     counts only once its handler has succeeded, so handlers always run in
//     version order); the rest go to their handlers. An event type with a
//     BatchHandler is applied set-wise: consecutive events of that type at
//     aggregate version 1 that go to a handler are given to it in one call,
//     in order (events decided without a handler in between are decided on
//     the way; an event at a later version ends the group, since its
//     predecessor check needs the group applied). Any other event of the
//     type comes alone, in a one-element call. An outcome that waits
//     (Outcome.Wait) defers its event there and then: the handler wrote
//     nothing for it, so nothing is undone.
//  3. One batch: delete the claims of events that were not applied, delete the
//     deferred rows of events that were, upsert the new deferrals, insert the
//     quarantines, RELEASE SAVEPOINT, and select the deferred rows waiting for
//     a key this run provided (FOR UPDATE SKIP LOCKED). Those are decided next,
//     the same way, on their stored raw bytes.
//
// A handler error that is not transient (DeferUntil, Permanent, a unique
// violation) leaves the transaction aborted or holding writes to undo, so the
// run is rolled back to its savepoint and decided again: the events before the
// failing one as a run, the failing one alone under its own savepoint (where
// the error becomes its decision), the events after it as a run. A
// deterministic handler runs at most twice for one message. After two failing
// runs in a row, the following events are decided alone until one applies, so
// a stretch of events all waiting for one missing fact costs a few round trips
// each rather than a run each. The healthy path has no per-event round trip of
// the inbox's own.
//
// A batch handler's error for one item (ItemError) is that item's handler
// error: the run is rolled back and decided again the same way, the item
// alone. An error naming no item that is not transient rolls the run back at
// the group's first event, and the group's events are then decided alone, one
// call each, until one is not applied (the culprit, whose error becomes its
// decision); the events after it go back to runs. A transient error, from a
// handler or a batch handler, is returned: the whole batch is tried again. So
// is an unclassified one within its event's budget; a panic, and the last
// attempt of the budget, are decided like a Permanent error (see "How a
// failing handler is survived" in failure.go).

// The first claim
//
// INSERT ... ON CONFLICT DO NOTHING inserts each row speculatively: it probes
// every unique index first, takes a lock on a speculative token, inserts,
// and confirms the row with a WAL record of its own. A plain INSERT of the
// same rows costs PostgreSQL a third less (docs/cpu-per-fact.md, "Where the
// WAL goes, and step 26"), and the claims are four rows per fact. Most runs
// meet no taken key, so a run claims with PlainClaimStatement: when that
// fails with a unique violation (a redelivery, an event whose slot another
// holds, a concurrent delivery that committed while the claim waited), the
// run rolls back to its savepoint and claims with ClaimStatement, which
// decides those events as before. A redelivery comes in stretches (a
// consumer that restarts reads again what it decided), so after a run that
// met a taken key the Inbox claims with ClaimStatement at once for the next
// carefulRuns runs that meet none; inbox_claim_retries_total counts the
// first claims rolled back.

// carefulRuns is how many runs in a row, after one that met a taken key,
// claim with ClaimStatement at once.
const carefulRuns = 16

// Savepoint is the name of the savepoint a run is decided under.
const Savepoint = "inbox_decide"

// ClaimStatement claims a run's events and reads what decides the rest, in
// one statement: $1 to $7 the events' ids, payload digests, types, tenants,
// aggregate types, ids and versions; $8 and $9 the bounds of the ids about
// each one's own (EventParts.Span.Around); $10 the least id a holder of each
// one's slot can have (HolderSince). Per event, in the order given: its id;
// whether this statement claimed it; the digest of its row when it did not;
// whether another event holds its aggregate slot outside its own ids' range
// (in another week: the claim met the slot's unique index in its own),
// looking below the range only from $10 on, and not at all when $10 is not
// below it. The inbox's statements are exported for the floor benchmark
// (e2e/floor), which sends them, not copies, so it measures what runs.
const ClaimStatement = claimHead + `
		    ON CONFLICT DO NOTHING` + claimTail

// PlainClaimStatement is ClaimStatement without ON CONFLICT DO NOTHING: it
// claims every event of the run, or fails with a unique violation when one
// of their ids or slots is taken (see "The first claim").
const PlainClaimStatement = claimHead + claimTail

const claimHead = `
		WITH k AS (
		    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
		                         $8::uuid[], $9::uuid[], $10::uuid[])
		         WITH ORDINALITY AS c(event_id, payload_digest, event_type, tenant_id,
		                              aggregate_type, aggregate_id, aggregate_version, lo, hi, since, n)
		), claim AS (
		    INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id,
		                             aggregate_type, aggregate_id, aggregate_version)
		    SELECT k.event_id, k.payload_digest, k.event_type, k.tenant_id,
		           k.aggregate_type, k.aggregate_id, k.aggregate_version
		    FROM k
		    ORDER BY k.n`

const claimTail = `
		    RETURNING event_id
		)
		SELECT k.event_id, claim.event_id IS NOT NULL,
		       CASE WHEN claim.event_id IS NULL THEN
		           (SELECT e.payload_digest FROM inbox_event e WHERE e.event_id = k.event_id) END,
		       CASE WHEN k.since < k.lo THEN
		           EXISTS (SELECT 1 FROM inbox_event e
		                   WHERE e.tenant_id = k.tenant_id AND e.aggregate_type = k.aggregate_type
		                     AND e.aggregate_id = k.aggregate_id AND e.aggregate_version = k.aggregate_version
		                     AND e.event_id >= k.since AND e.event_id < k.lo)
		       ELSE false END
		       OR EXISTS (SELECT 1 FROM inbox_event e
		                  WHERE e.tenant_id = k.tenant_id AND e.aggregate_type = k.aggregate_type
		                    AND e.aggregate_id = k.aggregate_id AND e.aggregate_version = k.aggregate_version
		                    AND e.event_id >= k.hi)
		FROM k LEFT JOIN claim ON claim.event_id = k.event_id`

// DeferredStatement reads the digest of each of a run's events ($1) that
// waits in inbox_deferred, NULL for the others.
const DeferredStatement = `
		SELECT k.id, (SELECT d.payload_digest FROM inbox_deferred d WHERE d.event_id = k.id)
		FROM unnest($1::uuid[]) AS k(id)`

// maxWake bounds the deferred rows one run wakes; the sweep takes the rest.
const maxWake = 10000

// item is one message on its way to a decision.
type item struct {
	msg     Message
	dec     *envelope.Decoded // nil when the message did not decode
	handler Handler
	batch   BatchHandler // instead of handler
	qreason string       // set when the message is quarantined without a lookup
	qdetail string       // what the inbox says of qreason, when anything
	hint    hint         // what could be read of a message that did not decode
	woken   bool
	span    trace.Span        // the decision's span, while tracing is on (trace.go)
	cause   trace.SpanContext // the event's traceparent, while tracing is off
}

// hint is what a message that failed decoding claims to be, when it is a JSON
// object at all, so an operator can find and redrive it by event id.
type hint struct {
	eventID   uuid.UUID
	eventType string
	tenantID  string
}

type slot struct {
	tenant, typ, id string
	version         int64
}

func slotOf(e *envelope.Envelope, version int64) slot {
	return slot{tenant: e.TenantID, typ: e.AggregateType, id: e.AggregateID, version: version}
}

func (s slot) key() string { return AggregateKey(s.tenant, s.typ, s.id, s.version) }

// Decide decides msgs inside tx, in order, and returns one decision per
// message, in the order of msgs, followed by the decisions of deferred events
// that the batch woke and decided too (Woken set). An error is transient: the
// caller must roll tx back and may try the same messages again.
//
// Decide should run in a READ COMMITTED transaction: it relies on seeing
// events that concurrent transactions committed while it waited for them.
func (ib *Inbox) Decide(ctx context.Context, tx pgx.Tx, msgs []Message) ([]Decision, error) {
	items := make([]*item, len(msgs))
	for i, m := range msgs {
		items[i] = ib.newItem(m, false)
	}
	ds, err := ib.process(ctx, tx, items)
	if err != nil {
		return nil, fmt.Errorf("decide %d messages: %w", len(msgs), err)
	}
	return ds, nil
}

func (ib *Inbox) newItem(m Message, woken bool) *item {
	it := &item{msg: m, woken: woken}
	d, err := ib.registry.Decode(m.Raw)
	if err != nil {
		reason, ok := envelope.ReasonOf(err)
		if !ok {
			reason = envelope.ReasonMalformed
		}
		it.qreason = reason
		if reason != envelope.ReasonMalformed && reason != envelope.ReasonTooLarge {
			it.hint = readHint(m.Raw)
		}
		return it
	}
	it.dec = d
	if ib.opts.Authorize != nil && !ib.opts.Authorize(m.Topic, &d.Envelope) {
		it.qreason = ReasonUnauthorizedProducer
		it.qdetail = fmt.Sprintf("%s from producer %q on topic %q", d.Envelope.EventType, d.Envelope.Producer, clip(m.Topic))
		return it
	}
	if b, ok := ib.batch[d.Envelope.EventType]; ok {
		it.batch = b
		return it
	}
	h, ok := ib.handlers[d.Envelope.EventType]
	if !ok {
		it.qreason = envelope.ReasonUnknownEventType
		return it
	}
	it.handler = h
	return it
}

func readHint(raw []byte) hint {
	var h struct {
		EventID   string `json:"eventId"`
		EventType string `json:"eventType"`
		TenantID  string `json:"tenantId"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return hint{}
	}
	id, _ := uuid.Parse(h.EventID)
	return hint{eventID: id, eventType: clip(h.EventType), tenantID: clip(h.TenantID)}
}

// clip bounds a producer-chosen string stored as a hint.
func clip(s string) string {
	if len(s) > envelope.MaxIDLength {
		return s[:envelope.MaxIDLength]
	}
	return s
}

func (it *item) env() *envelope.Envelope { return &it.dec.Envelope }

func (it *item) decision(outcome, reason string) Decision {
	d := Decision{Outcome: outcome, Reason: reason, Woken: it.woken}
	if it.dec != nil {
		d.EventID, d.EventType = it.dec.Envelope.EventID, it.dec.Envelope.EventType
	} else {
		d.EventID, d.EventType = it.hint.eventID, it.hint.eventType
	}
	return d
}

// process decides items in order; see "How a batch is decided".
func (ib *Inbox) process(ctx context.Context, tx pgx.Tx, items []*item) (_ []Decision, err error) {
	out := make([]Decision, len(items))
	for _, it := range items {
		it.startDecision(ctx)
	}
	defer func() {
		for i, it := range items {
			if err != nil {
				it.endDecision(nil, err)
			} else {
				it.endDecision(&out[i], nil)
			}
		}
	}()
	var woken []Decision
	isolate := -1 // index of the item to decide alone next
	// failing counts handler failures in a row; from two on, items are
	// decided alone until one applies, so a stretch of events that all wait
	// for one missing fact is not attempted twice each.
	failing := 0
	// Items before soloEnd are decided alone until one is not applied: a
	// batch handler failed for a group without naming the item.
	soloEnd := -1
	for start := 0; start < len(items); {
		var r *runResult
		var err error
		if start == isolate || failing >= 2 || start < soloEnd {
			r, err = ib.run(ctx, tx, items[start:start+1], true)
			if err == nil {
				if r.decisions[0].Outcome == OutcomeApplied {
					failing = 0
				} else if start < soloEnd {
					soloEnd = -1 // the culprit: the rest go back to runs
				}
			}
		} else {
			n := planRun(items[start:])
			if isolate > start && isolate-start < n {
				n = isolate - start
			}
			r, err = ib.run(ctx, tx, items[start:start+n], false)
			if err == nil {
				switch {
				case r.failAt == 0:
					failing++
				case r.failAt < 0 && n > 1:
					failing = 0
				}
				if r.soloEnd > 0 {
					soloEnd = start + r.soloEnd
				}
			}
		}
		if err != nil {
			return nil, err
		}
		if r.failAt >= 0 {
			isolate = start + r.failAt
			continue
		}
		ib.attempts.forget(r.decisions)
		copy(out[start:], r.decisions)
		start += len(r.decisions)
		if len(r.woken) > 0 {
			wd, err := ib.process(ctx, tx, r.woken)
			if err != nil {
				return nil, err
			}
			woken = append(woken, wd...)
		}
	}
	return append(out, woken...), nil
}

// planRun returns the length of the longest prefix of items in which no event
// id and no aggregate version repeats (at least 1).
func planRun(items []*item) int {
	ids := make(map[uuid.UUID]struct{}, len(items))
	slots := make(map[slot]struct{}, len(items))
	for i, it := range items {
		if it.qreason != "" {
			continue
		}
		e := it.env()
		s := slotOf(e, e.AggregateVersion)
		_, dupID := ids[e.EventID]
		_, dupSlot := slots[s]
		if dupID || dupSlot {
			return i
		}
		ids[e.EventID] = struct{}{}
		slots[s] = struct{}{}
	}
	return len(items)
}

type runResult struct {
	decisions []Decision
	woken     []*item
	failAt    int // index of the item whose handler failed; -1 when none
	// soloEnd, with failAt, ends the items to decide alone (relative, 0 when
	// none): a batch handler failed for its group without naming an item.
	soloEnd int
}

// runState is what step 1 of a run read.
type runState struct {
	claimed  map[uuid.UUID]bool   // claimed in inbox_event by this run
	digests  map[uuid.UUID]string // inbox_event digests of the run's ids
	preds    map[slot]uuid.UUID   // event holding each predecessor version
	deferred map[uuid.UUID]string // inbox_deferred digests of the run's ids
	taken    map[uuid.UUID]bool   // run's ids whose slot another event holds
	applied  map[slot]bool        // slots applied by this run so far
}

// pending is what step 3 of a run writes.
type pending struct {
	rollback    bool       // roll the savepoint back first (isolated failure)
	released    [][16]byte // claims of events not applied
	resolved    [][16]byte // deferred rows of events decided for good
	reclaims    []*item    // effect already exists: keep the inbox key
	deferrals   []deferral
	quarantines []quarantine
	wakeKeys    []string
	publish     []Publication // of the run's applied events, in order
	appendSpans []trace.Span  // of publish, ended once written (trace.go)
}

type deferral struct {
	it      *item
	waitKey string
	reason  string
}

type quarantine struct {
	it     *item
	reason string
	detail string // what the handler said: its error, or its panic and stack
}

// run decides items as one unit under one savepoint. Unless isolated, it
// stops at the first item whose handler fails for a reason that is not
// transient, rolls the savepoint back and reports the item's index in
// failAt. Isolated (one item), the failure becomes the item's decision.
func (ib *Inbox) run(ctx context.Context, tx pgx.Tx, items []*item, isolated bool) (*runResult, error) {
	u := &unit{ib: ib, tx: tx, items: items, isolated: isolated,
		res: &runResult{decisions: make([]Decision, len(items)), failAt: -1}}
	var cands []*item
	for _, it := range items {
		if it.qreason == "" {
			cands = append(cands, it)
		}
	}
	u.st = &runState{
		claimed:  make(map[uuid.UUID]bool, len(cands)),
		digests:  make(map[uuid.UUID]string, len(cands)),
		preds:    make(map[slot]uuid.UUID),
		taken:    make(map[uuid.UUID]bool),
		deferred: make(map[uuid.UUID]string),
		applied:  make(map[slot]bool, len(cands)),
	}
	if len(cands) > 0 {
		plain := ib.carefulRuns.Load() <= 0
		retried, err := u.st.read(ctx, tx, cands, ib.Minted, plain)
		if err != nil {
			return nil, err
		}
		u.savepointOpen = true // step 1 opened it
		switch {
		case retried || len(u.st.claimed) < len(cands):
			ib.carefulRuns.Store(carefulRuns)
			if retried {
				ib.metrics.claimRetries.Inc()
			}
		case !plain:
			ib.carefulRuns.Add(-1)
		}
	}
	for i := 0; i < len(items); {
		next, stop, err := u.step(ctx, i)
		if err != nil || stop {
			u.p.endAppends(errRunUndone)
			return u.res, err
		}
		i = next
	}
	woken, err := ib.write(ctx, tx, &u.p, u.savepointOpen)
	if err != nil {
		return nil, err
	}
	u.res.woken = woken
	return u.res, nil
}

// unit is a run on its way: what run's steps share.
type unit struct {
	ib            *Inbox
	tx            pgx.Tx
	items         []*item
	isolated      bool
	st            *runState
	p             pending
	res           *runResult
	savepointOpen bool
}

// step decides items[i], with its handler unless settle can, or the group of
// batch-handled events it starts; it returns the index of the next item. stop
// ends the run (a handler failed; see fail).
func (u *unit) step(ctx context.Context, i int) (next int, stop bool, err error) {
	it := u.items[i]
	if u.st.settle(&u.p, u.res, i, it) {
		return i + 1, false, nil
	}
	if it.batch != nil {
		return u.group(ctx, i)
	}
	var out Outcome
	var herr error
	if pe := u.ib.attempts.panicked(it.env().EventID); pe != nil {
		herr = pe // a known panic stands for the handler
	} else {
		hctx, span := it.startHandle(ctx)
		out, herr = callHandler(hctx, u.tx, it.handler, it.dec)
		if herr == nil {
			herr = out.check()
		}
		tracing.End(span, herr)
		if herr == nil {
			u.p.traceOutcome(hctx, out)
		}
	}
	if herr == nil {
		u.st.apply(&u.p, u.res, i, it, out)
		return i + 1, false, nil
	}
	stop, err = u.fail(ctx, i, herr)
	return i + 1, stop, err
}

// group applies the group of events that items[i] starts with their batch
// handler (see gather). An error naming no item that is not transient rolls
// the run back at the group's first event, to be decided alone with the
// group's others (soloEnd).
func (u *unit) group(ctx context.Context, i int) (next int, stop bool, err error) {
	group, next := u.gather(ctx, i)
	outs, herr := u.callGroup(ctx, group)
	if herr == nil && len(outs) != len(group) {
		return 0, true, fmt.Errorf("apply %d %s: batch handler returned %d outcomes",
			len(group), u.items[i].env().EventType, len(outs))
	}
	for k := 0; herr == nil && k < len(outs); k++ {
		if err := outs[k].check(); err != nil {
			herr = ItemError(k, err)
		}
	}
	if herr == nil {
		for k, idx := range group {
			u.st.apply(&u.p, u.res, idx, u.items[idx], outs[k])
		}
		return next, false, nil
	}
	at := group[0]
	var ie *itemError
	if errors.As(herr, &ie) && ie.index >= 0 && ie.index < len(group) {
		at, herr = group[ie.index], ie.err
	} else if kind, _ := u.ib.classify(u.tx, herr); len(group) > 1 && kind != failTransient {
		// Whatever failed is not known: the group's events are decided
		// alone, from its first, until one is not applied.
		u.res.soloEnd = group[len(group)-1] + 1
		return 0, true, u.rollback(ctx, at)
	}
	stop, err = u.fail(ctx, at, herr)
	return at + 1, stop, err // isolated: the group is this one item
}

// gather returns the group items[i] starts: it and the following events of
// its type at version 1 that go to their handler. The events decided without
// a handler in between (duplicates, conflicts, undecodable) are decided on
// the way, as their decisions do not depend on the group's effects. An event
// at a later version ends the group: its predecessor check needs the group
// applied first.
func (u *unit) gather(_ context.Context, i int) (group []int, next int) {
	it := u.items[i]
	group, next = []int{i}, i+1
	if u.isolated || it.env().AggregateVersion != 1 {
		return group, next
	}
	for next < len(u.items) {
		jt := u.items[next]
		if jt.qreason == "" && jt.env().AggregateVersion > 1 {
			break
		}
		if u.st.settle(&u.p, u.res, next, jt) {
			next++
			continue
		}
		if jt.batch == nil || jt.env().EventType != it.env().EventType {
			break
		}
		group = append(group, next)
		next++
	}
	return group, next
}

// callGroup calls the batch handler of the group's events; an event whose
// handler panicked before is that item's error, without a call. Each event
// gets its handle span; the call's context carries the one event's span when
// the group has one event, no event's when it has more.
func (u *unit) callGroup(ctx context.Context, group []int) (outs []Outcome, err error) {
	ds := make([]*envelope.Decoded, len(group))
	for k, idx := range group {
		it := u.items[idx]
		if pe := u.ib.attempts.panicked(it.env().EventID); pe != nil {
			return nil, ItemError(k, pe)
		}
		ds[k] = it.dec
	}
	hctxs := make([]context.Context, len(group))
	spans := make([]trace.Span, len(group))
	for k, idx := range group {
		hctxs[k], spans[k] = u.items[idx].startHandle(ctx)
	}
	callCtx := ctx
	if len(group) == 1 {
		callCtx = hctxs[0]
	}
	outs, err = callBatch(callCtx, u.tx, u.items[group[0]].batch, ds)
	for k, span := range spans {
		tracing.End(span, itemErr(err, k))
	}
	if err == nil && len(outs) == len(group) {
		for k := range group {
			u.p.traceOutcome(hctxs[k], outs[k])
		}
	}
	return outs, err
}

// itemErr is the part of a batch handler's error that concerns item k: all
// of an error naming no item, nothing of one naming another.
func itemErr(err error, k int) error {
	var ie *itemError
	if errors.As(err, &ie) && ie.index != k {
		return nil
	}
	return err
}

// settle decides items[i] without its handler when step 1's reads allow:
// undecodable, already decided (a duplicate or a digest conflict), a
// conflicting deferred copy, a version gap. It reports whether it decided.
func (st *runState) settle(p *pending, res *runResult, i int, it *item) bool {
	if it.qreason != "" {
		res.decisions[i] = p.quarantine(it, it.qreason, it.qdetail)
		return true
	}
	e := it.env()
	id := e.EventID
	if !st.claimed[id] {
		switch digest, seen := st.digests[id]; {
		case seen && digest == e.PayloadDigest:
			res.decisions[i] = it.decision(OutcomeDuplicate, "")
		case seen:
			res.decisions[i] = p.quarantine(it, ReasonDigestConflict, "") // a deferred copy is quarantined instead
		default: // another event holds this aggregate version
			res.decisions[i] = it.decision(OutcomeDuplicate, ReasonVersionApplied)
		}
		st.resolve(p, it)
		return true
	}
	if st.taken[id] { // another month's event holds this aggregate version
		p.released = append(p.released, id)
		res.decisions[i] = it.decision(OutcomeDuplicate, ReasonVersionApplied)
		st.resolve(p, it)
		return true
	}
	if deferredDigest, isDeferred := st.deferred[id]; isDeferred && deferredDigest != e.PayloadDigest {
		p.released = append(p.released, id)
		res.decisions[i] = p.quarantine(it, ReasonDigestConflict, "")
		return true
	}
	if e.AggregateVersion > 1 {
		prev := slotOf(e, e.AggregateVersion-1)
		holder, ok := st.preds[prev]
		if !ok || (st.claimed[holder] && !st.applied[prev]) {
			p.released = append(p.released, id)
			res.decisions[i] = p.deferral(it, prev.key(), ReasonVersionGap)
			return true
		}
	}
	return false
}

// resolve deletes the deferred copy of an event decided for good.
func (st *runState) resolve(p *pending, it *item) {
	e := it.env()
	if d, ok := st.deferred[e.EventID]; ok && d == e.PayloadDigest {
		p.resolved = append(p.resolved, e.EventID)
	}
}

// check refuses an outcome that waits yet publishes or provides: a handler's
// bug, counted against the event's retry budget.
func (o Outcome) check() error {
	if o.Wait != "" && (len(o.Publish) > 0 || len(o.Provides) > 0) {
		return fmt.Errorf("handler outcome waits for %q yet publishes %d events and provides %d keys",
			o.Wait, len(o.Publish), len(o.Provides))
	}
	return nil
}

// apply records items[i] applied with out, or deferred when out waits.
func (st *runState) apply(p *pending, res *runResult, i int, it *item, out Outcome) {
	e := it.env()
	if out.Wait != "" {
		p.released = append(p.released, e.EventID)
		res.decisions[i] = p.deferral(it, out.Wait, ReasonMissingFact)
		return
	}
	own := slotOf(e, e.AggregateVersion)
	st.applied[own] = true
	p.wakeKeys = append(p.wakeKeys, own.key())
	p.wakeKeys = append(p.wakeKeys, out.Provides...)
	p.publish = append(p.publish, out.Publish...)
	res.decisions[i] = it.decision(OutcomeApplied, "")
	st.resolve(p, it)
}

// fail handles the handler error herr of items[i]. A transient error, and
// an unclassified one within the event's retry budget (a *RetryError), is
// returned. Otherwise, unless isolated, the run is rolled back to its
// savepoint and stop reports items[i] in res.failAt. Isolated, the error
// becomes the item's decision.
func (u *unit) fail(ctx context.Context, i int, herr error) (stop bool, err error) {
	it := u.items[i]
	e := it.env()
	kind, reason := u.ib.classify(u.tx, herr)
	detail := errorDetail(herr)
	deferReason := ReasonMissingFact
	switch kind {
	case failTransient:
		return true, fmt.Errorf("apply %s %s: %w", e.EventType, e.EventID, herr)
	case failRetry, failTimeout:
		if n, again := u.ib.attempts.tryAgain(e.EventID, u.ib.budget); again {
			return true, &RetryError{EventID: e.EventID, EventType: e.EventType, Attempt: n, Budget: u.ib.budget, Err: herr}
		}
		if kind == failTimeout { // the last attempt: set aside
			kind, reason, deferReason = failDefer, TimeoutKey(e.EventID), ReasonStatementTimeout
			break
		}
		kind, reason = failPermanent, ReasonRetriesExhausted // the last attempt
	case failPanic:
		var pe *panicError
		errors.As(herr, &pe)
		if u.ib.attempts.panic(e.EventID, pe) {
			u.ib.log.ErrorContext(ctx, "handler panicked", "event_id", e.EventID, "event_type", e.EventType,
				"panic", fmt.Sprint(pe.value))
		}
		kind, detail = failPermanent, pe.detail()
	}
	if !u.isolated {
		return true, u.rollback(ctx, i)
	}
	if err := u.rollbackIsolated(ctx, e); err != nil {
		return true, err
	}
	if kind == failPartitionKey { // the run rolled back: the transaction reads again
		root, err := u.ib.originOf(ctx, u.tx, reason)
		if err != nil {
			return true, err
		}
		if root != "" {
			kind, reason = failDuplicate, ReasonEffectExists+":"+root
		} else {
			kind, reason = failPermanent, "integrity_violation:"+reason
		}
	}
	switch kind {
	case failDefer:
		u.res.decisions[i] = u.p.deferral(it, reason, deferReason)
	case failPermanent:
		u.res.decisions[i] = u.p.quarantine(it, reason, detail)
		u.st.resolve(&u.p, it)
	case failDuplicate:
		u.res.decisions[i] = it.decision(OutcomeDuplicate, reason)
		u.p.reclaims = append(u.p.reclaims, it)
		u.st.resolve(&u.p, it)
	}
	return false, nil
}

// rollback rolls the run back to its savepoint, to be decided again from
// items[i] (res.failAt).
func (u *unit) rollback(ctx context.Context, i int) error {
	if _, err := u.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+Savepoint+"; RELEASE SAVEPOINT "+Savepoint); err != nil {
		return fmt.Errorf("roll back run: %w", err)
	}
	u.res.failAt = i
	return nil
}

// rollbackIsolated undoes the claim and the handler's writes of the run's
// only item: step 3 starts by rolling back, then writes its decision outside
// the savepoint, so it leaves no committed subtransaction behind (more than
// 64 in one transaction overflow PostgreSQL's subxid cache). An aborted
// transaction cannot even prepare step 3's statements: it is rolled back at
// once then.
func (u *unit) rollbackIsolated(ctx context.Context, e *envelope.Envelope) error {
	if u.tx.Conn().PgConn().TxStatus() != 'E' {
		u.p.rollback = true
		return nil
	}
	if _, err := u.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+Savepoint+"; RELEASE SAVEPOINT "+Savepoint); err != nil {
		return fmt.Errorf("roll back %s: %w", e.EventID, err)
	}
	u.savepointOpen = false
	return nil
}

// read is step 1 of a run, in one round trip (see readUnseen for the rare
// second): open the savepoint, claim the run's events and read, in the same
// statement, the digests of those not claimed and the holders of their
// slots; then read their predecessors and their deferred rows.
//
// plain claims with PlainClaimStatement first. When one of the run's keys
// is taken, that statement fails: the run rolls back to the savepoint (which
// stays open) and claims again with ClaimStatement, in a second round trip;
// retried reports that.
func (st *runState) read(ctx context.Context, tx pgx.Tx, cands []*item, minted func(aggregateType string) bool, plain bool) (retried bool, err error) {
	claim := ClaimStatement
	if plain {
		claim = PlainClaimStatement
	}
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + Savepoint)
	ids := st.queueReads(b, claim, cands, minted)
	err = tx.SendBatch(ctx, b).Close()
	var pg *pgconn.PgError
	if plain && errors.As(err, &pg) && pg.Code == "23505" { // unique_violation: a key was taken
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+Savepoint); err != nil {
			return true, fmt.Errorf("claim %d events: roll the first claim back: %w", len(cands), err)
		}
		st.forgetReads()
		b = &pgx.Batch{}
		st.queueReads(b, ClaimStatement, cands, minted)
		retried, err = true, tx.SendBatch(ctx, b).Close()
	}
	if err != nil {
		return retried, fmt.Errorf("claim %d events: %w", len(cands), err)
	}
	return retried, st.readUnseen(ctx, tx, ids)
}

// queueReads queues step 1's statements after the savepoint: the claim (with
// the statement given), the predecessors' lookup and the deferred rows'. It
// returns the events' ids.
func (st *runState) queueReads(b *pgx.Batch, claim string, cands []*item, minted func(aggregateType string) bool) [][16]byte {
	ids := st.queueClaims(b, claim, cands, minted)
	st.queuePredecessors(b, cands)
	b.Queue(DeferredStatement, ids).
		Query(scanDigests(st.deferred))
	return ids
}

// forgetReads empties what a claim rolled back had read.
func (st *runState) forgetReads() {
	clear(st.claimed)
	clear(st.digests)
	clear(st.preds)
	clear(st.deferred)
	clear(st.taken)
}

// queueClaims queues the claim of cands in inbox_event with the lookups that
// decide the events it did not claim, in one statement; it records the
// events this run claimed, the digests of the others and the events whose
// slot another event holds, and returns the events' ids.
//
// A claimed event needs no digest (it is new), so its id is not probed. The
// lookups probe unique indexes one key at a time (scalar subqueries) rather
// than join or filter by "= ANY": PostgreSQL then keeps index scans in its
// cached generic plans even when they were planned on a new, empty table,
// instead of sequential scans that grow with the table.
//
// Beside each id's digest, the statement reads whether another event holds
// the event's aggregate slot: the slot is unique within a week of
// inbox_event only (see months.go), so a holder in another week is found
// here, one probe of each other partition's slot index. The event's own
// partition needs none: its unique slot let the claim through, or refused it
// (then the digest decides). The probe leaves out the ids about the event's
// that no partition boundary cuts (monthpart's Around), so PostgreSQL prunes
// the event's own week and probes the others; below the event's range, only
// those from HolderSince on (minted aggregates: usually none).
//
// The lookups see the statement's snapshot, from before the claim, so an
// event that the claim did not take because a concurrent delivery of it
// committed while the claim waited has no digest here: readUnseen reads
// those again.
func (st *runState) queueClaims(b *pgx.Batch, claim string, cands []*item, minted func(aggregateType string) bool) [][16]byte {
	n := len(cands)
	ids := make([][16]byte, n)
	digests := make([]string, n)
	types := make([]string, n)
	los, his, sinces := make([][16]byte, n), make([][16]byte, n), make([][16]byte, n)
	for i, it := range cands {
		e := it.env()
		ids[i] = e.EventID
		digests[i] = e.PayloadDigest
		types[i] = e.EventType
		lo, hi := EventParts.Span.Around(e.EventID)
		los[i], his[i] = lo, hi
		sinces[i] = HolderSince(e.AggregateID, minted(e.AggregateType))
	}
	tenants, aggTypes, aggIDs, versions := slotColumns(cands)
	// The claim is the arbiter between concurrent deliveries: it waits for
	// a transaction holding the same key and then sees its outcome.
	b.Queue(claim,
		ids, digests, types, tenants, aggTypes, aggIDs, versions, los, his, sinces).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id uuid.UUID
				var claimed, taken bool
				var digest pgtype.Text
				if err := rows.Scan(&id, &claimed, &digest, &taken); err != nil {
					return err
				}
				if claimed {
					st.claimed[id] = true
				}
				if digest.Valid {
					st.digests[id] = digest.String
				}
				if taken {
					st.taken[id] = true
				}
			}
			return rows.Err()
		})
	return ids
}

// readUnseen reads again, in a statement of its own (a snapshot taken after
// the claim), the digest of each event the claim did not take yet whose row
// it did not see: a concurrent delivery of it committed while the claim
// waited. Still none, another event holds its slot (the claim met it in the
// slot's unique index). Most runs have none to read and make no round trip
// here.
func (st *runState) readUnseen(ctx context.Context, tx pgx.Tx, ids [][16]byte) error {
	var unseen [][16]byte
	for _, id := range ids {
		if _, seen := st.digests[id]; !st.claimed[id] && !seen {
			unseen = append(unseen, id)
		}
	}
	if len(unseen) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
		SELECT k.id, (SELECT e.payload_digest FROM inbox_event e WHERE e.event_id = k.id)
		FROM unnest($1::uuid[]) AS k(id)`, unseen)
	if err != nil {
		return fmt.Errorf("read %d events claimed concurrently: %w", len(unseen), err)
	}
	defer rows.Close()
	if err := scanDigests(st.digests)(rows); err != nil {
		return fmt.Errorf("read %d events claimed concurrently: %w", len(unseen), err)
	}
	return nil
}

// slotColumns returns the aggregate slots of cands as columns.
func slotColumns(cands []*item) (tenants, aggTypes, aggIDs []string, versions []int64) {
	n := len(cands)
	tenants, aggTypes, aggIDs, versions = make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, it := range cands {
		e := it.env()
		tenants[i], aggTypes[i], aggIDs[i], versions[i] = e.TenantID, e.AggregateType, e.AggregateID, e.AggregateVersion
	}
	return tenants, aggTypes, aggIDs, versions
}

// queuePredecessors queues the lookup of the event holding the version before
// each of cands' (those past version 1), one index probe per key.
func (st *runState) queuePredecessors(b *pgx.Batch, cands []*item) {
	var preds []slot
	var tenants, types, ids []string
	var versions []int64
	for _, it := range cands {
		e := it.env()
		if e.AggregateVersion > 1 {
			preds = append(preds, slotOf(e, e.AggregateVersion-1))
			tenants = append(tenants, e.TenantID)
			types = append(types, e.AggregateType)
			ids = append(ids, e.AggregateID)
			versions = append(versions, e.AggregateVersion-1)
		}
	}
	if len(preds) == 0 {
		return
	}
	b.Queue(`
		SELECT k.n, (SELECT e.event_id FROM inbox_event e
		             WHERE e.tenant_id = k.tenant_id AND e.aggregate_type = k.aggregate_type
		               AND e.aggregate_id = k.aggregate_id AND e.aggregate_version = k.aggregate_version)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY
		     AS k(tenant_id, aggregate_type, aggregate_id, aggregate_version, n)`,
		tenants, types, ids, versions).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var n int
				var id pgtype.UUID
				if err := rows.Scan(&n, &id); err != nil {
					return err
				}
				if id.Valid {
					st.preds[preds[n-1]] = id.Bytes
				}
			}
			return rows.Err()
		})
}

// scanDigests reads (event id, digest) rows into into, skipping ids that have
// no row.
func scanDigests(into map[uuid.UUID]string) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var id uuid.UUID
			var digest pgtype.Text
			if err := rows.Scan(&id, &digest); err != nil {
				return err
			}
			if digest.Valid {
				into[id] = digest.String
			}
		}
		return rows.Err()
	}
}

func (p *pending) deferral(it *item, waitKey, reason string) Decision {
	p.deferrals = append(p.deferrals, deferral{it: it, waitKey: waitKey, reason: reason})
	d := it.decision(OutcomeDeferred, reason)
	d.WaitKey = waitKey
	return d
}

func (p *pending) quarantine(it *item, reason, detail string) Decision {
	p.quarantines = append(p.quarantines, quarantine{it: it, reason: reason, detail: detail})
	return it.decision(OutcomeQuarantined, reason)
}

// write is step 3 of a run, in one round trip; it returns the deferred
// events to wake.
func (ib *Inbox) write(ctx context.Context, tx pgx.Tx, p *pending, savepointOpen bool) ([]*item, error) {
	b := &pgx.Batch{}
	if p.rollback {
		b.Queue("ROLLBACK TO SAVEPOINT " + Savepoint)
		b.Queue("RELEASE SAVEPOINT " + Savepoint)
		savepointOpen = false
	}
	if len(p.released) > 0 {
		b.Queue(`DELETE FROM inbox_event WHERE event_id = ANY($1::uuid[])`, p.released)
	}
	for _, id := range p.resolved { // by key: see the lookups in read
		b.Queue(`DELETE FROM inbox_deferred WHERE event_id = $1`, id)
	}
	for _, it := range p.reclaims {
		e := it.env()
		b.Queue(`
			INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id,
			                         aggregate_type, aggregate_id, aggregate_version)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT DO NOTHING`,
			[16]byte(e.EventID), e.PayloadDigest, e.EventType, e.TenantID, e.AggregateType, e.AggregateID, e.AggregateVersion)
	}
	if len(p.deferrals) > 0 {
		queueDeferrals(b, p.deferrals)
		for _, d := range p.deferrals {
			ib.log.DebugContext(ctx, "event deferred", "event_id", d.it.env().EventID,
				"event_type", d.it.env().EventType, "wait_key", d.waitKey, "reason", d.reason)
		}
	}
	created := ib.queueQuarantines(ctx, b, p.quarantines)
	if err := queuePublications(b, p.publish); err != nil {
		return nil, err
	}
	if savepointOpen {
		b.Queue("RELEASE SAVEPOINT " + Savepoint)
	}
	var woken []*item
	if keys := dedupe(p.wakeKeys); len(keys) > 0 {
		// One index probe per key, oldest versions first.
		b.Queue(`
			SELECT w.raw, w.topic, w.partition, w."offset"
			FROM unnest($1::text[]) AS k(wait_key)
			CROSS JOIN LATERAL (
				SELECT d.raw, d.topic, d.partition, d."offset", d.aggregate_version, d.first_seen, d.event_id
				FROM inbox_deferred d
				WHERE d.wait_key = k.wait_key
				LIMIT $2
				FOR UPDATE SKIP LOCKED) AS w
			ORDER BY w.aggregate_version, w.first_seen, w.event_id
			LIMIT $2`, keys, maxWake).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var m Message
					if err := rows.Scan(&m.Raw, &m.Topic, &m.Partition, &m.Offset); err != nil {
						return err
					}
					woken = append(woken, ib.newItem(m, true))
				}
				return rows.Err()
			})
	}
	if b.Len() > 0 {
		err := tx.SendBatch(ctx, b).Close()
		p.endAppends(err)
		if err != nil {
			return nil, fmt.Errorf("record decisions: %w", err)
		}
	}
	if ib.opts.OnQuarantine != nil {
		for _, q := range *created {
			if err := ib.opts.OnQuarantine(ctx, tx, q); err != nil {
				return nil, fmt.Errorf("on quarantine of %s: %w", q.RawSHA256, err)
			}
		}
	}
	return woken, nil
}

// queueQuarantines queues the inserts of qs; the returned slice holds, once
// the batch has run, the rows newly created (not identical bytes seen again).
func (ib *Inbox) queueQuarantines(ctx context.Context, b *pgx.Batch, qs []quarantine) *[]Quarantined {
	created := make([]Quarantined, 0, len(qs))
	for _, q := range qs {
		sum := sha256.Sum256(q.it.msg.Raw)
		rec := Quarantined{
			RawSHA256: hex.EncodeToString(sum[:]),
			Reason:    q.reason,
			Detail:    q.detail,
			Topic:     q.it.msg.Topic,
			Partition: q.it.msg.Partition,
			Offset:    q.it.msg.Offset,
		}
		if q.it.dec != nil {
			e := q.it.env()
			rec.EventID, rec.EventType, rec.TenantID, rec.Envelope = e.EventID, e.EventType, e.TenantID, e
		} else {
			rec.EventID, rec.EventType, rec.TenantID = q.it.hint.eventID, q.it.hint.eventType, q.it.hint.tenantID
		}
		b.Queue(`
			INSERT INTO inbox_quarantine (raw_sha256, event_id, event_type, tenant_id, reason, raw,
			                              topic, partition, "offset", detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (raw_sha256) DO UPDATE
			SET attempts = inbox_quarantine.attempts + 1, last_seen = now(),
			    reason = EXCLUDED.reason, detail = EXCLUDED.detail, state = 'quarantined'
			RETURNING id, attempts, (xmax = 0)`,
			rec.RawSHA256, pgtype.UUID{Bytes: rec.EventID, Valid: rec.EventID != uuid.Nil},
			nullText(rec.EventType), nullText(rec.TenantID), rec.Reason, q.it.msg.Raw,
			rec.Topic, rec.Partition, rec.Offset, nullText(rec.Detail)).
			QueryRow(func(row pgx.Row) error {
				var attempts int
				var inserted bool
				if err := row.Scan(&rec.ID, &attempts, &inserted); err != nil {
					return err
				}
				ib.log.WarnContext(ctx, "message quarantined", "event_id", rec.EventID,
					"event_type", rec.EventType, "tenant_id", rec.TenantID, "reason", rec.Reason,
					"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "attempts", attempts)
				if inserted {
					created = append(created, rec)
				}
				return nil
			})
	}
	return &created
}

// queuePublications queues the outbox appends of a run: consecutive events
// of one topic in one statement, in the run's order.
func queuePublications(b *pgx.Batch, ps []Publication) error {
	for start := 0; start < len(ps); {
		end := start + 1
		for end < len(ps) && ps[end].Topic == ps[start].Topic {
			end++
		}
		evs := make([]envelope.Envelope, 0, end-start)
		for _, p := range ps[start:end] {
			evs = append(evs, p.Event)
		}
		if err := outbox.QueueAppend(b, ps[start].Topic, evs...); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		start = end
	}
	return nil
}

func dedupe(keys []string) []string {
	seen := make(map[string]struct{}, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

func queueDeferrals(b *pgx.Batch, ds []deferral) {
	n := len(ds)
	ids := make([][16]byte, n)
	keys := make([]string, n)
	reasons := make([]string, n)
	raws := make([][]byte, n)
	digests := make([]string, n)
	types := make([]string, n)
	tenants := make([]string, n)
	aggTypes := make([]string, n)
	aggIDs := make([]string, n)
	versions := make([]int64, n)
	topics := make([]string, n)
	partitions := make([]int32, n)
	offsets := make([]int64, n)
	for i, d := range ds {
		e := d.it.env()
		ids[i], keys[i], reasons[i], raws[i] = e.EventID, d.waitKey, d.reason, d.it.msg.Raw
		digests[i], types[i], tenants[i] = e.PayloadDigest, e.EventType, e.TenantID
		aggTypes[i], aggIDs[i], versions[i] = e.AggregateType, e.AggregateID, e.AggregateVersion
		topics[i], partitions[i], offsets[i] = d.it.msg.Topic, d.it.msg.Partition, d.it.msg.Offset
	}
	// A deferred event seen again keeps its first raw bytes and first_seen.
	// The sweep retries it after 1, 2, 4, 8, then every 10 seconds: an event
	// that waits for a fact nothing announces (a close waiting for its last
	// charges, which do not wake it) must not wait minutes once the fact is
	// here, and one sweep decides at most SweepLimit events.
	b.Queue(`
		INSERT INTO inbox_deferred (event_id, wait_key, reason, raw, payload_digest, event_type,
		                            tenant_id, aggregate_type, aggregate_id, aggregate_version,
		                            topic, partition, "offset")
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[],
		                     $7::text[], $8::text[], $9::text[], $10::bigint[],
		                     $11::text[], $12::int[], $13::bigint[])
		ON CONFLICT (event_id) DO UPDATE
		SET wait_key = EXCLUDED.wait_key, reason = EXCLUDED.reason,
		    last_attempt = now(), attempts = inbox_deferred.attempts + 1,
		    next_attempt = now() + LEAST(interval '1 second' * power(2, LEAST(inbox_deferred.attempts, 4)),
		                                 interval '10 seconds')`,
		ids, keys, reasons, raws, digests, types, tenants, aggTypes, aggIDs, versions, topics, partitions, offsets)
}

func nullText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

type failKind int

const (
	failTransient failKind = iota // the infrastructure's: retried, never counted
	failDefer
	failPermanent
	failDuplicate
	failRetry // unclassified: retried within the event's budget
	failPanic
	// failTimeout: the statement timeout; retried within the event's
	// budget, then deferred aside (never quarantined: the event may fit
	// once the database is less busy or the timeout is raised).
	failTimeout
	// failPartitionKey: a unique violation on a constraint not named in
	// Options.OriginConstraints, which may be a partition's copy of one of
	// them: a DUPLICATE if it is, a permanent error if not (originOf).
	failPartitionKey
)

// originOf returns the constraint of Options.OriginConstraints of which
// constraint is a partition's copy (its index attached, at any depth, to
// that constraint's index), or "" when it is none. A partitioned table's
// unique violation names the partition's constraint (projected_event's
// month partition's projected_event_p202612_pkey, not projected_event_pkey).
// The answer is kept: a constraint's partition does not change.
func (ib *Inbox) originOf(ctx context.Context, tx pgx.Tx, constraint string) (string, error) {
	if root, ok := ib.partitionOrigins.Load(constraint); ok {
		return root.(string), nil
	}
	var root string
	err := tx.QueryRow(ctx, `
		WITH RECURSIVE up AS (
		    SELECT c.conindid AS idx FROM pg_constraint c
		    WHERE c.conname = $1 AND c.contype IN ('p', 'u') AND c.connamespace = current_schema()::regnamespace
		  UNION
		    SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.idx
		)
		SELECT COALESCE((SELECT c.conname::text FROM up JOIN pg_constraint c ON c.conindid = up.idx
		                 WHERE c.conname = ANY($2::text[]) ORDER BY c.conname LIMIT 1), '')`,
		constraint, ib.opts.OriginConstraints).Scan(&root)
	if err != nil {
		return "", fmt.Errorf("look up constraint %s: %w", constraint, err)
	}
	ib.partitionOrigins.Store(constraint, root)
	return root, nil
}

// TimeoutKey is the wait key of an event set aside after its handler ran
// into the statement timeout on every attempt (ReasonStatementTimeout).
// Nothing provides it: the sweep decides the event again, backing off.
func TimeoutKey(id uuid.UUID) string { return "statement-timeout/" + id.String() }

// classify sorts a handler's error (see "How a failing handler is
// survived"); detail is the wait key, the quarantine reason or the
// duplicate's reason.
func (ib *Inbox) classify(tx pgx.Tx, err error) (kind failKind, detail string) {
	var pe *panicError
	if errors.As(err, &pe) {
		return failPanic, ReasonHandlerPanic
	}
	var de *deferError
	if errors.As(err, &de) {
		return failDefer, de.key
	}
	var perm *permanentError
	if errors.As(err, &perm) {
		return failPermanent, perm.reason
	}
	var dup *duplicateError
	if errors.As(err, &dup) {
		return failDuplicate, ReasonEffectExists + ":" + dup.what
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		what := pg.ConstraintName
		if what == "" {
			what = pg.Code
		}
		switch {
		case pg.Code == "57014": // query_canceled: the statement timeout (or a cancel request)
			return failTimeout, ""
		case pg.Code == "23505": // unique_violation
			if len(ib.origin) == 0 || ib.origin[pg.ConstraintName] {
				return failDuplicate, ReasonEffectExists + ":" + what
			}
			if root, known := ib.partitionOrigins.Load(pg.ConstraintName); known {
				if root != "" {
					return failDuplicate, ReasonEffectExists + ":" + root.(string)
				}
				return failPermanent, "integrity_violation:" + what
			}
			// Maybe a partition's copy of an origin constraint: the catalog
			// tells, once the run is rolled back (originOf).
			return failPartitionKey, what
		case strings.HasPrefix(pg.Code, "23"): // integrity constraint violation
			return failPermanent, "integrity_violation:" + what
		case strings.HasPrefix(pg.Code, "22"): // data exception
			return failPermanent, "data_exception:" + pg.Code
		}
	}
	if infrastructure(tx, err) {
		return failTransient, ""
	}
	return failRetry, ""
}
