// Package operator is the query service's operator application: the
// audited redrives, of a retained consumed event or of an outbox dead letter
// (an append-only audit row and a RedriveRequested through the outbox, in one
// transaction), the
// handlers of the ops events every service publishes (EventQuarantined into
// the quarantine view, RedriveCompleted into the audit), and the
// cross-service reads (recovery counts, dead letters, reconciliation) made
// through each service's internal endpoints: query never reads another
// service's database.
package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/query/internal/db"
)

// Self is the query service's name: its own counts are read locally.
const Self = "query"

// Errors of the operator commands and reads.
var (
	ErrUnknownService = errors.New("unknown service")
	ErrNotFound       = errors.New("redrive not found")
	// ErrEventNotFound: the service holds no such event to act on.
	ErrEventNotFound = errors.New("event not found")
	// ErrUpstream: a service's internal endpoint could not be read.
	ErrUpstream = errors.New("service unavailable")
)

// Operator runs the operator commands and reads.
type Operator struct {
	pool   *pgxpool.Pool
	client *ops.Client
	log    *slog.Logger
	local  recon.Sets // query's own reconciliation sets
}

// New returns the Operator on pool, reaching the other services with client
// and reading query's own reconciliation sets from local (App.Reconciliation).
func New(pool *pgxpool.Pool, client *ops.Client, local recon.Sets, log *slog.Logger) *Operator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Operator{pool: pool, client: client, log: log, local: local}
}

// Services are the services the operator acts on: query and every service
// with a configured URL.
func (o *Operator) Services() []string {
	out := []string{Self}
	for _, s := range o.client.Services() {
		if s != Self {
			out = append(out, s)
		}
	}
	return out
}

func (o *Operator) knows(service string) bool { return service == Self || o.client.Knows(service) }

// Request is an operator's action on an event a service retains.
type Request struct {
	Service       string
	EventID       uuid.UUID
	Action        string // events.ActionRedrive or events.ActionRedriveDeadLetter
	Reason        string
	Actor         string // from the credential
	CorrelationID string
}

// Redrive is an operator action and its audit.
type Redrive struct {
	ID      uuid.UUID
	Service string
	EventID uuid.UUID
	Action  string
	State   string // "requested" | "completed"
	Outcome string // set once completed
	Audit   []AuditEntry
}

// AuditEntry is one state of a Redrive, as appended.
type AuditEntry struct {
	State         string
	Actor         string
	CorrelationID string
	Reason        string
	Outcome       string
	At            time.Time
}

// Audit states.
const (
	StateRequested = "requested"
	StateCompleted = "completed"
)

// Submit records the request in the audit and sends its RedriveRequested
// to the owning service through the outbox, in one transaction.
func (o *Operator) Submit(ctx context.Context, req Request) (Redrive, error) {
	if !o.knows(req.Service) {
		return Redrive{}, fmt.Errorf("%w %q", ErrUnknownService, req.Service)
	}
	switch held, err := o.holds(ctx, req); {
	case err != nil:
		// The service cannot be asked now: the request goes through the
		// outbox as ever, and completes not_found if the event is not there.
		o.log.WarnContext(ctx, "redrive: could not ask the service whether it holds the event; requesting it all the same",
			"service", req.Service, "event_id", req.EventID, "action", req.Action, "err", err)
	case !held:
		what := "quarantined event"
		if req.Action == events.ActionRedriveDeadLetter {
			what = "dead letter"
		}
		return Redrive{}, fmt.Errorf("%w: %s holds no %s %s", ErrEventNotFound, req.Service, what, req.EventID)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Redrive{}, fmt.Errorf("new redrive id: %w", err)
	}
	env, err := events.New(events.RedriveRequested{RedriveID: id, Service: req.Service, EventID: req.EventID.String(),
		Action: req.Action, Reason: req.Reason, Actor: req.Actor}, events.Meta{
		Producer: Self, TenantID: events.OpsTenant, AggregateID: events.RedriveAggregateID(id), OccurredAt: time.Now(),
		CorrelationID: req.CorrelationID,
	})
	if err != nil {
		return Redrive{}, err
	}
	err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		if err := db.New(tx).AppendRedriveAudit(ctx, db.AppendRedriveAuditParams{
			RedriveID: id, Service: req.Service, EventID: req.EventID, Action: req.Action, State: StateRequested,
			Actor: req.Actor, CorrelationID: req.CorrelationID, Reason: req.Reason, SourceEventID: env.EventID,
		}); err != nil {
			return fmt.Errorf("audit redrive %s: %w", id, err)
		}
		return events.Append(ctx, tx, env)
	})
	if err != nil {
		return Redrive{}, err
	}
	o.log.InfoContext(ctx, "redrive requested", "redrive_id", id, "service", req.Service, "event_id", req.EventID,
		"action", req.Action, "actor", req.Actor, "correlation_id", req.CorrelationID)
	return Redrive{ID: id, Service: req.Service, EventID: req.EventID, Action: req.Action, State: StateRequested}, nil
}

// holds reports whether the service holds what req acts on, as its own
// internal endpoints say (or query's database, for query): a quarantined
// message of the event, in any state (a redrive asked again decides it
// again), for a redrive; a dead letter of that id for a release. A typo
// is then refused at once, not audited as a request that ends not_found.
// An event the service only holds deferred is not found: it is decided by
// itself when what it waits for arrives, or quarantined when it expires.
func (o *Operator) holds(ctx context.Context, req Request) (bool, error) {
	id := req.EventID.String()
	if req.Action == events.ActionRedriveDeadLetter {
		for after := int64(0); ; {
			var page ops.DeadLetterPage
			var err error
			if req.Service == Self {
				page, err = ops.ListDeadLetters(ctx, o.pool, after, ops.MaxLimit)
			} else {
				page, err = o.client.DeadLetters(ctx, req.Service, after, ops.MaxLimit)
			}
			if err != nil {
				return false, err
			}
			for _, d := range page.Items {
				if d.EventID == id {
					return true, nil
				}
			}
			if page.Next == nil || len(page.Items) == 0 {
				return false, nil
			}
			after = page.Items[len(page.Items)-1].ID
		}
	}
	var page ops.QuarantinePage
	var err error
	if req.Service == Self {
		page, err = ops.ListQuarantine(ctx, o.pool, inbox.QuarantineFilter{EventID: req.EventID, All: true, Limit: 1})
	} else {
		page, err = o.client.Quarantine(ctx, req.Service, url.Values{"eventId": {id}, "state": {"all"}, "limit": {"1"}})
	}
	if err != nil {
		return false, err
	}
	return len(page.Items) > 0, nil
}

// Redrive reads a redrive and its audit.
func (o *Operator) Redrive(ctx context.Context, id uuid.UUID) (Redrive, error) {
	rows, err := db.New(o.pool).RedriveAudit(ctx, id)
	if err != nil {
		return Redrive{}, fmt.Errorf("read redrive %s: %w", id, err)
	}
	if len(rows) == 0 {
		return Redrive{}, ErrNotFound
	}
	r := Redrive{ID: id, Service: rows[0].Service, EventID: rows[0].EventID, Action: rows[0].Action}
	for _, row := range rows {
		r.State = row.State
		if row.Outcome.Valid {
			r.Outcome = row.Outcome.String
		}
		r.Audit = append(r.Audit, AuditEntry{State: row.State, Actor: row.Actor, CorrelationID: row.CorrelationID,
			Reason: row.Reason, Outcome: row.Outcome.String, At: row.At.UTC()})
	}
	return r, nil
}

// Handlers are the inbox handlers of the ops events query consumes.
func (o *Operator) Handlers() map[string]inbox.Handler {
	return map[string]inbox.Handler{
		events.TypeEventQuarantined: inbox.On(o.onQuarantined),
		events.TypeRedriveCompleted: inbox.On(o.onCompleted),
	}
}

// OriginConstraints are the unique constraints of the ops effects' origins.
var OriginConstraints = []string{"quarantine_notice_event_key", "redrive_audit_source_key", "redrive_audit_state_key"}

func (o *Operator) onQuarantined(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.EventQuarantined) (inbox.Outcome, error) {
	var quarantined uuid.NullUUID
	if p.EventID != "" {
		id, err := uuid.Parse(p.EventID)
		if err != nil {
			return inbox.Outcome{}, inbox.Permanent(inbox.ReasonInvalidEventID, err)
		}
		quarantined = uuid.NullUUID{UUID: id, Valid: true}
	}
	err := db.New(tx).InsertQuarantineNotice(ctx, db.InsertQuarantineNoticeParams{
		EventID: d.Envelope.EventID, Service: p.Service, QuarantinedEventID: quarantined, EventType: p.EventType,
		TenantID: p.EventTenantID, Reason: p.Reason, RawSha256: p.RawSHA256, Topic: p.Topic, Partition: p.Partition,
		Offset: p.Offset, QuarantinedAt: p.QuarantinedAt,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("record quarantine notice %s: %w", d.Envelope.EventID, err)
	}
	return inbox.Outcome{}, nil
}

func (o *Operator) onCompleted(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.RedriveCompleted) (inbox.Outcome, error) {
	eventID, err := uuid.Parse(p.EventID)
	if err != nil {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonInvalidEventID, err)
	}
	action := p.Action
	if action == "" {
		action = events.ActionRedrive
	}
	err = db.New(tx).AppendRedriveAudit(ctx, db.AppendRedriveAuditParams{
		RedriveID: p.RedriveID, Service: p.Service, EventID: eventID, Action: action, State: StateCompleted,
		Outcome: pgtype.Text{String: p.Outcome, Valid: true}, Actor: "service:" + p.Service,
		CorrelationID: d.Envelope.CorrelationID, Reason: p.Reason, SourceEventID: d.Envelope.EventID,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("audit completion of redrive %s: %w", p.RedriveID, err)
	}
	return inbox.Outcome{}, nil
}

// ServiceRecovery is one service's recovery counts, or why they could not
// be read.
type ServiceRecovery struct {
	ops.Recovery
	Err error
}

// Recovery reads every service's recovery counts, concurrently.
func (o *Operator) Recovery(ctx context.Context) map[string]ServiceRecovery {
	services := o.Services()
	out := make(map[string]ServiceRecovery, len(services))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range services {
		wg.Go(func() {
			var r ops.Recovery
			var err error
			if s == Self {
				r, err = ops.ReadRecovery(ctx, o.pool)
			} else {
				r, err = o.client.Recovery(ctx, s)
			}
			if err != nil {
				o.log.WarnContext(ctx, "read recovery counts", "service", s, "err", err)
			}
			mu.Lock()
			out[s] = ServiceRecovery{Recovery: r, Err: err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// QuarantineFilter selects quarantine view items.
type QuarantineFilter struct {
	Service, Reason, TenantID string
	IncludeRedriven           bool
	// After is the Seq the page starts after (0: from the first).
	After int64
	// Limit is how many items to read at most.
	Limit int32
}

// QuarantineItem is one message of the cross-service quarantine view.
type QuarantineItem struct {
	Seq           int64 // the item's position in the view's order
	Service       string
	EventID       string
	EventType     string
	TenantID      string
	Reason        string
	Topic         string
	Partition     int32
	Offset        int64
	QuarantinedAt time.Time
	Redriven      bool
}

// Quarantine reads the quarantine view after f.After in arrival (Seq)
// order, at most f.Limit items.
func (o *Operator) Quarantine(ctx context.Context, f QuarantineFilter) ([]QuarantineItem, error) {
	rows, err := db.New(o.pool).ListQuarantineNotices(ctx, db.ListQuarantineNoticesParams{
		After: f.After, Service: f.Service, Reason: f.Reason, TenantID: f.TenantID,
		IncludeRedriven: f.IncludeRedriven, MaxRows: f.Limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list quarantine view: %w", err)
	}
	items := make([]QuarantineItem, len(rows))
	for i, r := range rows {
		items[i] = QuarantineItem{Seq: r.Seq, Service: r.Service, EventType: r.EventType, TenantID: r.TenantID,
			Reason: r.Reason, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
			QuarantinedAt: r.QuarantinedAt.UTC(), Redriven: r.Redriven}
		if r.QuarantinedEventID.Valid {
			items[i].EventID = r.QuarantinedEventID.UUID.String()
		}
	}
	return items, nil
}

// DeadLetter is one dead letter of a service's outbox.
type DeadLetter struct {
	Service string
	ops.DeadLetter
}

// DeadLetterKey is a dead letter's position in the cross-service order:
// service name, then the id in that service's outbox. The zero key is before
// every dead letter.
type DeadLetterKey struct {
	Service string
	ID      int64
}

// Key is d's position in the cross-service order.
func (d DeadLetter) Key() DeadLetterKey { return DeadLetterKey{Service: d.Service, ID: d.ID} }

// DeadLetters reads the outbox dead letters after position after, at most
// limit of them: of one service, or with service empty of every service in
// (service name, id) order. Each service's internal list is read page by
// page until limit are found or the services run out.
func (o *Operator) DeadLetters(ctx context.Context, service string, after DeadLetterKey, limit int) ([]DeadLetter, error) {
	services := []string{service}
	if service == "" {
		services = o.Services()
		slices.Sort(services)
	} else if !o.knows(service) {
		return nil, fmt.Errorf("%w %q", ErrUnknownService, service)
	}
	var out []DeadLetter
	for _, s := range services {
		if s < after.Service {
			continue
		}
		var from int64
		if s == after.Service {
			from = after.ID
		}
		for len(out) < limit {
			n := min(limit-len(out), ops.MaxLimit)
			var page ops.DeadLetterPage
			var err error
			if s == Self {
				page, err = ops.ListDeadLetters(ctx, o.pool, from, n)
			} else {
				page, err = o.client.DeadLetters(ctx, s, from, n)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrUpstream, s, err)
			}
			for _, d := range page.Items {
				out = append(out, DeadLetter{Service: s, DeadLetter: d})
			}
			if page.Next == nil || len(page.Items) == 0 {
				break
			}
			from = page.Items[len(page.Items)-1].ID
		}
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}
