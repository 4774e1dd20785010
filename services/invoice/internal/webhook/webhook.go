// Package webhook tells a tenant's own systems about its invoices through
// signed HTTP webhooks, delivered through durable intents: the transaction that issues an invoice or a
// correction note records, for each active endpoint of the tenant, an intent
// (what to send, to whom, under which idempotency key, until when); a Worker
// delivers it after commit under a lease, never inside a database
// transaction, keeps the receiver's answer and reference, retries with
// backoff until the intent expires, and leaves what it could not deliver to
// an operator.
//
// Three facts stay apart: the intent committed with the invoice ("our
// commit"), the receiver's 2xx ("accepted", with its reference), and
// whatever the receiver does with it. The receiver dedups on Webhook-Id: a
// delivery is at least once.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/invoice/internal/webhook/webhookdb"
)

// Intent statuses.
const (
	StatusPending  = "pending"  // due at not_before
	StatusLeased   = "leased"   // a worker is delivering it
	StatusAccepted = "accepted" // the receiver answered 2xx
	StatusFailed   = "failed"   // the receiver refused it for good (or its endpoint was deleted)
	StatusExpired  = "expired"  // not accepted by expires_at
)

// Statuses lists the statuses in their lifecycle order.
var Statuses = []string{StatusPending, StatusLeased, StatusAccepted, StatusFailed, StatusExpired}

// Webhook event types, as the body's `type` names them.
const (
	TypeInvoiceIssued           = "invoice.issued"
	TypeInvoiceCorrectionIssued = "invoice.correction_issued"
	// TypeAlertTriggered tells that a tenant's alert reached its threshold
	// in a period (once per alert and period).
	TypeAlertTriggered = "alert.triggered"
)

// DefaultTTL is how long an intent is tried when the Recorder is not
// configured (WEBHOOK_TTL).
const DefaultTTL = 72 * time.Hour

// Recorder writes intents in the issuing transaction.
type Recorder struct {
	// TTL is how long after its commit an intent is tried before it
	// expires into the operator's queue.
	TTL time.Duration
}

// Body is what a receiver gets: the event's figures (InvoiceIssued or
// InvoiceCorrectionIssued), never the invoice's lines, so it stays small
// whatever the volume.
type Body struct {
	ID       string          `json:"id"`   // the idempotency key, as in Webhook-Id
	Type     string          `json:"type"` // invoice.issued | invoice.correction_issued | alert.triggered
	TenantID string          `json:"tenantId"`
	EventID  uuid.UUID       `json:"eventId"` // the invoice event told, or the alert's crossing
	Created  time.Time       `json:"createdAt"`
	Data     json.RawMessage `json:"data"` // the event's payload
}

// Key is the idempotency key of an invoice event: the invoice and its
// aggregate version (1 is the invoice's issue, each correction note the
// next), so the same invoice or note makes one key whatever redelivers it.
func Key(e *envelope.Envelope) string {
	return fmt.Sprintf("inv_%s_v%d", e.AggregateID, e.AggregateVersion)
}

func webhookType(eventType string) (string, bool) {
	switch eventType {
	case events.TypeInvoiceIssued:
		return TypeInvoiceIssued, true
	case events.TypeInvoiceCorrectionIssued:
		return TypeInvoiceCorrectionIssued, true
	}
	return "", false
}

// Record writes, in tx (the transaction that issues them), one intent per
// active endpoint of the event's tenant for each InvoiceIssued and
// InvoiceCorrectionIssued of evs; other events are skipped. Writing the
// same event again writes nothing (webhook_intent_key). A nil Recorder
// records with DefaultTTL.
func (r *Recorder) Record(ctx context.Context, tx pgx.Tx, evs ...envelope.Envelope) error {
	var ns []Notice
	for i := range evs {
		e := &evs[i]
		typ, ok := webhookType(e.EventType)
		if !ok {
			continue
		}
		ns = append(ns, Notice{TenantID: e.TenantID, Key: Key(e), EventID: e.EventID, EventType: e.EventType, Type: typ,
			Created: e.OccurredAt, Data: e.Payload})
	}
	return r.RecordNotices(ctx, tx, ns...)
}

// Notice is one thing to tell a tenant's endpoints: an invoice event
// (Record), or a fact of invoice's own with no event on the bus (an alert's
// crossing, TypeAlertTriggered).
type Notice struct {
	TenantID string
	// Key is the idempotency key (Webhook-Id): the same key is one intent
	// per endpoint, whatever writes it again.
	Key       string
	EventID   uuid.UUID // the event, or the fact's own id
	EventType string    // as the operator's list shows it
	Type      string    // the body's type
	Created   time.Time
	Data      json.RawMessage
}

// RecordNotices writes, in tx, one intent per active endpoint of each
// notice's tenant; a key written before for an endpoint writes nothing. A
// nil Recorder records with DefaultTTL.
func (r *Recorder) RecordNotices(ctx context.Context, tx pgx.Tx, ns ...Notice) error {
	ttl := DefaultTTL
	if r != nil && r.TTL > 0 {
		ttl = r.TTL
	}
	q := webhookdb.New(tx)
	endpoints := map[string][]uuid.UUID{}
	byTenant := map[string]*webhookdb.InsertIntentsParams{}
	var tenants []string
	for _, n := range ns {
		ids, seen := endpoints[n.TenantID]
		if !seen {
			var err error
			if ids, err = q.ActiveEndpointIDs(ctx, n.TenantID); err != nil {
				return fmt.Errorf("read webhook endpoints of %s: %w", n.TenantID, err)
			}
			endpoints[n.TenantID] = ids
		}
		if len(ids) == 0 {
			continue
		}
		body, err := json.Marshal(Body{ID: n.Key, Type: n.Type, TenantID: n.TenantID, EventID: n.EventID,
			Created: n.Created.UTC(), Data: n.Data})
		if err != nil {
			return fmt.Errorf("webhook body of %s: %w", n.EventID, err)
		}
		p, ok := byTenant[n.TenantID]
		if !ok {
			p = &webhookdb.InsertIntentsParams{TenantID: n.TenantID, TtlSeconds: ttl.Seconds()}
			byTenant[n.TenantID] = p
			tenants = append(tenants, n.TenantID)
		}
		for _, endpoint := range ids {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("new intent id: %w", err)
			}
			p.IntentIds = append(p.IntentIds, id)
			p.EndpointIds = append(p.EndpointIds, endpoint)
			p.IdempotencyKeys = append(p.IdempotencyKeys, n.Key)
			p.EventIds = append(p.EventIds, n.EventID)
			p.EventTypes = append(p.EventTypes, n.EventType)
			p.Bodies = append(p.Bodies, string(body))
		}
	}
	for _, t := range tenants {
		if _, err := q.InsertIntents(ctx, *byTenant[t]); err != nil {
			return fmt.Errorf("record webhook intents of %s: %w", t, err)
		}
	}
	return nil
}
