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
	Type     string          `json:"type"` // invoice.issued | invoice.correction_issued
	TenantID string          `json:"tenantId"`
	EventID  uuid.UUID       `json:"eventId"` // the invoice event told
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
	ttl := DefaultTTL
	if r != nil && r.TTL > 0 {
		ttl = r.TTL
	}
	q := webhookdb.New(tx)
	endpoints := map[string][]uuid.UUID{}
	byTenant := map[string]*webhookdb.InsertIntentsParams{}
	var tenants []string
	for i := range evs {
		e := &evs[i]
		typ, ok := webhookType(e.EventType)
		if !ok {
			continue
		}
		ids, seen := endpoints[e.TenantID]
		if !seen {
			var err error
			if ids, err = q.ActiveEndpointIDs(ctx, e.TenantID); err != nil {
				return fmt.Errorf("read webhook endpoints of %s: %w", e.TenantID, err)
			}
			endpoints[e.TenantID] = ids
		}
		if len(ids) == 0 {
			continue
		}
		body, err := json.Marshal(Body{ID: Key(e), Type: typ, TenantID: e.TenantID, EventID: e.EventID,
			Created: e.OccurredAt.UTC(), Data: e.Payload})
		if err != nil {
			return fmt.Errorf("webhook body of %s: %w", e.EventID, err)
		}
		p, ok := byTenant[e.TenantID]
		if !ok {
			p = &webhookdb.InsertIntentsParams{TenantID: e.TenantID, TtlSeconds: ttl.Seconds()}
			byTenant[e.TenantID] = p
			tenants = append(tenants, e.TenantID)
		}
		for _, endpoint := range ids {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("new intent id: %w", err)
			}
			p.IntentIds = append(p.IntentIds, id)
			p.EndpointIds = append(p.EndpointIds, endpoint)
			p.IdempotencyKeys = append(p.IdempotencyKeys, Key(e))
			p.EventIds = append(p.EventIds, e.EventID)
			p.EventTypes = append(p.EventTypes, e.EventType)
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
