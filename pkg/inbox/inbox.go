// Package inbox decides every consumed event in the same PostgreSQL
// transaction as its effect, as exactly one of:
//
//   - APPLIED: first time seen and its predecessors are here; the handler's
//     effect (and whatever it appends to the outbox) commits with the
//     decision.
//   - DUPLICATE: the same eventId with the same digest was decided before, or
//     the event's aggregate version, or its business effect, already exists.
//     No effect; success.
//   - DEFERRED: the aggregate's previous version, or a fact the handler needs
//     (DeferUntil), is not here yet. The raw message is kept and decided again
//     when the missing event is applied, or by the periodic Sweep.
//   - QUARANTINED: the message can never be processed as it is (undecodable,
//     unknown type or schema, a producer not allowed to publish it on its
//     topic (Options.Authorize), the same eventId with another digest, a
//     Permanent handler error, a payload of another type than the handler's,
//     a handler that panicked or failed past its retry budget). The raw bytes
//     are kept with the reason (one of the list in reasons.go) and what the
//     handler said, and the events behind it keep flowing. An operator's
//     Redrive decides it again later through the decoders and handlers of
//     the day.
//
// A failure of the infrastructure (the database is down, a deadlock, a
// cancelled context) is transient: Decide returns the error, the caller rolls
// the transaction back and tries the same messages again, without limit; it is
// never quarantined. A handler error the inbox cannot classify is retried the
// same way, but only Options.RetryBudget times per event (Decide returns a
// *RetryError meanwhile); then the event is quarantined as
// ReasonRetriesExhausted. A handler's panic is recovered and quarantines its
// event as ReasonHandlerPanic with the stack. See failure.go.
//
// Handlers are registered typed, On[T] and OnBatch[T], so the payload type is
// checked in one place.
//
// Runner consumes Kafka topics through a consumer group and decides them in
// batches, marking a message's offset only after its batch has committed.
package inbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the inbox schema, tracked in its own migrations table so it
// can live beside a service's own schema.
var Migrations = pgmigrate.Set{FS: migrationFiles, Dir: "migrations", Table: "inbox_schema_migrations",
	Needs: []pgmigrate.Set{monthpart.Migrations}}

// Migrate applies the inbox schema to the database.
func Migrate(_ context.Context, databaseURL string) error {
	return pgmigrate.Up(databaseURL, Migrations)
}

// Outcomes of a Decision.
const (
	OutcomeApplied     = "applied"
	OutcomeDuplicate   = "duplicate"
	OutcomeDeferred    = "deferred"
	OutcomeQuarantined = "quarantined"
)

// Reasons a message is not applied besides the quarantine reasons (see
// reasons.go): why it was deferred, or what made it a duplicate.
const (
	// ReasonVersionGap: the aggregate's previous version is not applied yet.
	ReasonVersionGap = "version_gap"
	// ReasonMissingFact: the handler asked to wait for a fact (DeferUntil).
	ReasonMissingFact = "missing_fact"
	// ReasonStatementTimeout: the handler's statement ran past the
	// database's statement timeout on every attempt of the event's budget;
	// the event is set aside (TimeoutKey, which nothing provides: the sweep
	// tries it again) so that its partition moves on.
	ReasonStatementTimeout = "statement_timeout"
	// ReasonVersionApplied: another event already holds this aggregate
	// version (a DUPLICATE).
	ReasonVersionApplied = "version_already_applied"
	// ReasonEffectExists prefixes a DUPLICATE found by a unique constraint of
	// the business effect: "effect_exists:<constraint>".
	ReasonEffectExists = "effect_exists"
)

// Message is one consumed message, as received.
type Message struct {
	Raw       []byte
	Topic     string
	Partition int32
	Offset    int64
}

// Decision is how one event was decided.
type Decision struct {
	// EventID is the event's id; zero when the message is not an envelope.
	EventID uuid.UUID
	// EventType is the event's type, as far as it could be read.
	EventType string
	// Outcome is OutcomeApplied, OutcomeDuplicate, OutcomeDeferred or
	// OutcomeQuarantined.
	Outcome string
	// Reason says why a message was not applied: the quarantine reason, the
	// deferral reason (ReasonVersionGap, ReasonMissingFact), or what made it a
	// duplicate.
	Reason string
	// WaitKey is what a DEFERRED event waits for.
	WaitKey string
	// Woken is set on the decision of a deferred event that was decided again
	// because an event of the same call provided what it waited for.
	Woken bool
}

// Outcome is what a successful handler reports.
type Outcome struct {
	// Publish lists the events the application publishes. The inbox appends
	// them to the outbox in the deciding transaction, with the decisions of
	// the handler's run (one statement per topic for the whole run, in the
	// run's order; outbox.QueueAppend), so they commit exactly when the
	// effect does and cost no round trip of their own. A handler may still
	// call outbox.Append itself.
	Publish []Publication
	// Provides lists the keys this application makes available, e.g.
	// "price/t1/api_calls/USD@3". Deferred events waiting for one of them are
	// decided again in the same transaction. The aggregate key of the applied
	// event (AggregateKey) is provided without being listed.
	Provides []string
	// Wait, when set, defers the event until the key is provided, as
	// DeferUntil(key) does, without undoing anything: the handler wrote
	// nothing for this event, and publishes and provides nothing. A
	// BatchHandler says so of the events it cannot apply yet while it
	// applies the others of the call; an ItemError instead would undo the
	// call and decide its events again one at a time.
	Wait string
}

// Publication is an event to publish on a topic.
type Publication struct {
	Topic string
	Event envelope.Envelope
}

// Handler applies one decoded event inside tx. It returns DeferUntil(key) when
// a fact it needs is missing, Permanent(reason, err) when the event can never
// be applied, Duplicate(what) when its effect exists. Whatever it wrote before
// returning an error (or panicking) is undone. A unique violation it raises
// counts as DUPLICATE (see Options.OriginConstraints); another integrity
// violation or a data exception (SQLSTATE classes 23 and 22) counts as
// Permanent. An error of the database's connection, a deadlock or a cancelled
// context is transient, retried without limit; the statement timeout is
// retried up to Options.RetryBudget times, then sets the event aside
// (DEFERRED, ReasonStatementTimeout); any other error is retried up
// to Options.RetryBudget times, then quarantines the event
// (ReasonRetriesExhausted); a panic quarantines it at once
// (ReasonHandlerPanic). Register handlers with On, which gives them the
// payload typed.
type Handler func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (Outcome, error)

// BatchHandler applies several decoded events of one type inside tx, in
// order, as if a Handler had been called for each in turn, and returns one
// Outcome per event. It is given consecutive events of a run that are at
// aggregate version 1 and passed the inbox's checks (see "How a batch is
// decided"); any other event comes alone, in a one-element slice.
//
// An event it cannot apply yet and wrote nothing for is reported by its
// Outcome's Wait. Errors are a Handler's, for the whole call or for one item: an error for
// the item at index i is returned as ItemError(i, err), with err classified
// like a Handler's (DeferUntil, Permanent, Duplicate, a unique violation, a
// data exception, transient, or unclassified and counted against the item's
// budget). Whatever the call wrote is undone and the
// events before the item are applied again without it; the item is then
// decided alone, so a deterministic handler sees its error again there. An
// error naming no item that is not transient, and a panic, make the inbox
// give the call's events one at a time until one is not applied (the one
// that panics alone is quarantined). A BatchHandler should name the first
// failing item in order. Register batch handlers with OnBatch.
type BatchHandler func(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded) ([]Outcome, error)

// Quarantined describes a message just quarantined, for Options.OnQuarantine.
type Quarantined struct {
	// ID is the inbox_quarantine row.
	ID int64
	// EventID is zero when the message is not an envelope.
	EventID   uuid.UUID
	EventType string
	TenantID  string
	Reason    string
	// RawSHA256 is the lowercase hex SHA-256 of the raw bytes.
	RawSHA256 string
	Topic     string
	Partition int32
	Offset    int64
	// Envelope is the decoded envelope when the message decoded (a digest
	// conflict, a Permanent handler error); nil otherwise.
	Envelope *envelope.Envelope
	// Detail is what the handler said, bounded to 8 KiB: its error, or, for
	// ReasonHandlerPanic, the panic value and the stack. Empty when the inbox
	// quarantined the message itself.
	Detail string
}

// Options configure an Inbox.
type Options struct {
	// Service names the consuming service in metrics and logs.
	Service string
	// Logger receives quarantines (warn) and deferrals (debug). Nil discards.
	Logger *slog.Logger
	// Registerer registers the inbox metrics; nil registers none.
	Registerer prometheus.Registerer
	// OnQuarantine, when set, is called in the deciding transaction each time
	// a new quarantine row is created (not when identical bytes come again), so
	// the service can append an EventQuarantined to its outbox atomically. An
	// error is transient: the whole batch is tried again.
	OnQuarantine func(ctx context.Context, tx pgx.Tx, q Quarantined) error
	// OriginConstraints names the unique constraints that guard a business
	// effect's origin event. A handler's unique violation on one of them, or
	// on a partition's copy of one (projected_event_p202612_pkey of
	// projected_event_pkey: the catalog tells, once per constraint), is a
	// DUPLICATE named after it; on any other constraint it is a Permanent
	// error. Empty means every unique violation is a DUPLICATE.
	OriginConstraints []string
	// BatchHandlers apply event types set-wise (BatchHandler). An event type
	// has either a handler or a batch handler, not both.
	BatchHandlers map[string]BatchHandler
	// RetryBudget is how many attempts a handler failing with an error the
	// inbox cannot classify (not Permanent, DeferUntil or Duplicate, not the
	// database's or the network's) is given before its event is quarantined
	// as ReasonRetriesExhausted; DefaultRetryBudget (5) when zero or less.
	// The attempts are counted in memory, per event, and only those that
	// fail in the handler: a database outage does not use the budget up.
	RetryBudget int
	// Authorize, when set, is asked of every event that decodes whether its
	// producer may publish it on the topic it arrived on (for the services,
	// events.Authorized: the type's own topic, written by the service that
	// owns the type). An event it refuses is QUARANTINED as
	// ReasonUnauthorizedProducer before any lookup: it claims no event id
	// and reaches no handler, so a forgery cannot take a genuine event's
	// place. Nil accepts every producer on every topic.
	Authorize func(topic string, e *envelope.Envelope) bool
	// MintedAggregates names the aggregate types whose ids are UUIDv7s that
	// their producer mints no later than the aggregate's first event, such as
	// a usage fact's or a charge's (for the services,
	// events.MintedAggregates). An event holding the slot of such an
	// aggregate names its id, so it was minted after it: the claim looks for
	// a holder in the weeks before an event's own only from the id's time
	// less MintSkew (HolderSince), which for a fact minted now is none of
	// them (decision 0028). Every other aggregate's holder is looked for in
	// every week.
	MintedAggregates []string
}

// Inbox decides consumed events. It is safe for concurrent use.
type Inbox struct {
	registry *envelope.Registry
	handlers map[string]Handler
	batch    map[string]BatchHandler
	opts     Options
	origin   map[string]bool
	minted   map[string]bool
	budget   int
	attempts attempts
	log      *slog.Logger
	metrics  *metrics
	// carefulRuns counts down the runs that claim with ClaimStatement at
	// once (see "The first claim" in decide.go); shared by the lanes.
	carefulRuns atomic.Int32
	// partitionOrigins caches originOf: a constraint's name -> the origin
	// constraint it is a partition's copy of, "" for none.
	partitionOrigins sync.Map
}

// New returns an Inbox that decodes with registry and applies each event type
// with its handler. An event type without a handler is quarantined as
// unknown_event_type, unless Options.BatchHandlers has one for it. The error
// reports a failed metrics registration or a type with both kinds of handler.
func New(registry *envelope.Registry, handlers map[string]Handler, opts Options) (*Inbox, error) {
	if registry == nil {
		return nil, errors.New("new inbox: nil registry")
	}
	hs := make(map[string]Handler, len(handlers))
	for t, h := range handlers {
		if h == nil {
			return nil, fmt.Errorf("new inbox: nil handler for %s", t)
		}
		hs[t] = h
	}
	bs := make(map[string]BatchHandler, len(opts.BatchHandlers))
	for t, h := range opts.BatchHandlers {
		if h == nil {
			return nil, fmt.Errorf("new inbox: nil batch handler for %s", t)
		}
		if _, both := hs[t]; both {
			return nil, fmt.Errorf("new inbox: %s has both a handler and a batch handler", t)
		}
		bs[t] = h
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "inbox", "service", opts.Service)
	m, err := newMetrics(opts.Registerer, opts.Service)
	if err != nil {
		return nil, fmt.Errorf("new inbox: register metrics: %w", err)
	}
	origin := make(map[string]bool, len(opts.OriginConstraints))
	for _, c := range opts.OriginConstraints {
		origin[c] = true
	}
	minted := make(map[string]bool, len(opts.MintedAggregates))
	for _, t := range opts.MintedAggregates {
		minted[t] = true
	}
	budget := opts.RetryBudget
	if budget <= 0 {
		budget = DefaultRetryBudget
	}
	return &Inbox{registry: registry, handlers: hs, batch: bs, opts: opts, origin: origin, minted: minted, budget: budget,
		log: log, metrics: m}, nil
}

// AggregateKey is the wait key of an aggregate's version: a deferred event of
// version v waits for AggregateKey(..., v-1), which every applied event
// provides for its own version.
func AggregateKey(tenantID, aggregateType, aggregateID string, version int64) string {
	return "agg/" + tenantID + "/" + aggregateType + "/" + aggregateID + "@" + strconv.FormatInt(version, 10)
}

// DeferUntil is the error a handler returns when a fact it needs (named by
// key) is missing: the event is DEFERRED until an applied event provides key
// (Outcome.Provides), or until the sweep finds it applicable.
func DeferUntil(key string) error {
	return &deferError{key: key}
}

type deferError struct{ key string }

func (e *deferError) Error() string { return "defer until " + e.key }

// Permanent is the error a handler returns when the event can never be
// applied: it is QUARANTINED with reason (a short machine-readable word).
func Permanent(reason string, err error) error {
	if reason == "" {
		reason = ReasonPermanent
	}
	return &permanentError{reason: reason, err: err}
}

type permanentError struct {
	reason string
	err    error
}

func (e *permanentError) Error() string {
	if e.err == nil {
		return "permanent: " + e.reason
	}
	return "permanent: " + e.reason + ": " + e.err.Error()
}

func (e *permanentError) Unwrap() error { return e.err }

// Duplicate is the error a handler returns when the event's business effect
// already exists and it found so without raising a unique violation (e.g. an
// INSERT ... ON CONFLICT DO NOTHING that inserted nothing): the event is a
// DUPLICATE with reason "effect_exists:<what>", as for a unique violation of
// an origin constraint.
func Duplicate(what string) error {
	if what == "" {
		what = "duplicate"
	}
	return &duplicateError{what: what}
}

type duplicateError struct{ what string }

func (e *duplicateError) Error() string { return "duplicate: " + e.what }

// ItemError is the error a BatchHandler returns when the item at index (of
// the slice it was given) failed with err; err is classified as a Handler's
// error would be.
func ItemError(index int, err error) error {
	if err == nil {
		return nil
	}
	return &itemError{index: index, err: err}
}

type itemError struct {
	index int
	err   error
}

func (e *itemError) Error() string { return fmt.Sprintf("item %d: %v", e.index, e.err) }

func (e *itemError) Unwrap() error { return e.err }

// ErrNotRetained is returned by Redrive for an event the inbox holds neither
// deferred nor quarantined.
var ErrNotRetained = errors.New("event not retained as deferred or quarantined")

// Querier is what Stats needs: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Stats is the inbox's backlog.
type Stats struct {
	// Deferred is the number of deferred events.
	Deferred int64
	// OldestDeferredAge is the age of the oldest deferred event (first seen).
	OldestDeferredAge time.Duration
	// Quarantined is the number of quarantined messages not redriven.
	Quarantined int64
}

// Minted reports whether the inbox takes aggregateType's ids as minted
// with the aggregate's first event (Options.MintedAggregates): its claims
// look for holders of such a slot only since the id's time (HolderSince).
func (ib *Inbox) Minted(aggregateType string) bool { return ib.minted[aggregateType] }

// Stats reads the inbox's backlog (ReadStats).
func (ib *Inbox) Stats(ctx context.Context, q Querier) (Stats, error) { return ReadStats(ctx, q) }

// StatsCountCap bounds the counts ReadStats makes, deferred events and
// quarantined messages: a larger backlog reads as StatsCountCap, so a
// refresh costs the same whatever the backlog (a million facts deferred
// behind a price version were counted in one scan every refresh). The
// oldest deferred age is read from an index's head whatever the count.
const StatsCountCap = 10_000

// ReadStats reads the backlog of the inbox in the database q reaches:
// Deferred and Quarantined counted up to StatsCountCap.
func ReadStats(ctx context.Context, q Querier) (Stats, error) {
	var s Stats
	var ageSeconds float64
	err := q.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM (SELECT 1 FROM inbox_deferred LIMIT $1) d),
		       (SELECT COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(first_seen)), 0)::float8 FROM inbox_deferred),
		       (SELECT count(*) FROM (SELECT 1 FROM inbox_quarantine WHERE state = 'quarantined' LIMIT $1) q)`, StatsCountCap).
		Scan(&s.Deferred, &ageSeconds, &s.Quarantined)
	if err != nil {
		return Stats{}, fmt.Errorf("read inbox stats: %w", err)
	}
	if ageSeconds > 0 {
		s.OldestDeferredAge = time.Duration(ageSeconds * float64(time.Second))
	}
	return s, nil
}

// RefreshGauges reads Stats and sets the deferred and quarantined gauges.
// Runner calls it periodically.
func (ib *Inbox) RefreshGauges(ctx context.Context, q Querier) (Stats, error) {
	s, err := ib.Stats(ctx, q)
	if err != nil {
		return Stats{}, err
	}
	ib.metrics.deferred.Set(float64(s.Deferred))
	ib.metrics.deferredAge.Set(s.OldestDeferredAge.Seconds())
	ib.metrics.quarantined.Set(float64(s.Quarantined))
	return s, nil
}

// Observe counts committed decisions in inbox_decisions_total. Call it after
// the transaction that Decide, Redrive or RedriveQuarantined ran in has
// committed (Runner and Sweep do), so rolled-back attempts are not counted.
func (ib *Inbox) Observe(ds []Decision) {
	for _, d := range ds {
		t := d.EventType
		_, ok := ib.handlers[t]
		if _, batch := ib.batch[t]; !ok && !batch {
			t = "unknown" // bounded label values: only types this inbox handles
		}
		ib.metrics.decisions.WithLabelValues(d.Outcome, t).Inc()
	}
}
