package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkaconf"
)

// Operator is a client of query's operator API, with an operator token.
type Operator struct {
	QueryURL string
	Token    string // "Bearer ..."
	Actor    string
}

// DevOperator returns an operator client for actor with a token signed by the
// environment's signer (auth.SignerFromEnv: the published development key
// unless AUTH_SIGNING_KEY names the issuer's key), valid for an hour. A
// signer the environment gets wrong panics with its reason.
func DevOperator(queryURL, actor string) Operator {
	tok, err := auth.TokenFromEnv(actor, auth.RoleOperator, "")
	if err != nil {
		panic(fmt.Sprintf("scenario: operator token: %v", err)) // the environment names a bad key
	}
	return Operator{QueryURL: queryURL, Token: "Bearer " + tok, Actor: actor}
}

func (o Operator) do(ctx context.Context, method, path string, body any, headers map[string]string, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, o.QueryURL+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", o.Token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %s: %w", method, path, raw, err)
		}
	}
	return resp.StatusCode, nil
}

// RecoveryStatus reads GET /v1/operator/recovery.
func (o Operator) RecoveryStatus(ctx context.Context) (map[string]Recovery, error) {
	var out struct {
		Services map[string]struct {
			OutboxPending int64  `json:"outboxPending"`
			DeadLetters   int64  `json:"deadLetters"`
			Deferred      int64  `json:"deferred"`
			Quarantined   int64  `json:"quarantined"`
			Available     bool   `json:"available"`
			Error         string `json:"error"`
		} `json:"services"`
	}
	if _, err := o.do(ctx, http.MethodGet, "/v1/operator/recovery", nil, nil, &out); err != nil {
		return nil, err
	}
	rec := map[string]Recovery{}
	for name, s := range out.Services {
		if !s.Available {
			return nil, fmt.Errorf("recovery of %s unavailable: %s", name, s.Error)
		}
		rec[name] = Recovery{OutboxPending: s.OutboxPending, DeadLetters: s.DeadLetters, Deferred: s.Deferred, Quarantined: s.Quarantined}
	}
	return rec, nil
}

// QuarantineItem is one row of GET /v1/operator/quarantine.
type QuarantineItem = queryapi.QuarantineItem

// Quarantine lists quarantined events of a tenant (all services).
func (o Operator) Quarantine(ctx context.Context, tenant string) ([]QuarantineItem, error) {
	var out queryapi.QuarantineList
	_, err := o.do(ctx, http.MethodGet, "/v1/operator/quarantine?tenantId="+url.QueryEscape(tenant), nil, nil, &out)
	return out.Items, err
}

// AuditEntry is one appended state of a redrive.
type AuditEntry = queryapi.AuditEntry

// Redrive is GET /v1/operator/redrives/{id}.
type Redrive = queryapi.Redrive

// Redrive asks service to redrive eventID and waits for its completion.
func (o Operator) Redrive(ctx context.Context, service, eventID, reason, correlationID string, wait time.Duration) (Redrive, error) {
	var accepted queryapi.RedriveAccepted
	if _, err := o.do(ctx, http.MethodPost, "/v1/operator/redrives",
		map[string]string{"service": service, "eventId": eventID, "reason": reason},
		map[string]string{"X-Correlation-Id": correlationID}, &accepted); err != nil {
		return Redrive{}, err
	}
	deadline := time.Now().Add(wait)
	for {
		var r Redrive
		if _, err := o.do(ctx, http.MethodGet, "/v1/operator/redrives/"+accepted.RedriveId, nil, nil, &r); err != nil {
			return r, err
		}
		if r.Outcome != nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("redrive %s of %s in %s: no outcome after %v (state %s)", r.RedriveId, eventID, service, wait, r.State)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Mismatch is one line of a reconciliation.
type Mismatch = queryapi.Mismatch

// Reconciliation is GET /v1/operator/reconciliation.
type Reconciliation = queryapi.Reconciliation

// Reconcile reads the reconciliation of a tenant's period.
func (o Operator) Reconcile(ctx context.Context, tenant, period string) (Reconciliation, error) {
	var out Reconciliation
	_, err := o.do(ctx, http.MethodGet, "/v1/operator/reconciliation?tenantId="+url.QueryEscape(tenant)+"&period="+url.QueryEscape(period), nil, nil, &out)
	return out, err
}

// RegisterUsageV2 teaches a service UsageAccepted at schema version 2,
// which has the same fields as version 1: the "fixed release" of the
// recovery story (e2e/cmd/billing-next, e2e/cmd/query-next).
func RegisterUsageV2(r *envelope.Registry) {
	envelope.Register[events.UsageAccepted](r, events.TypeUsageAccepted, 2)
}

// InjectUsageV2 publishes, straight to usage.events.v1, a UsageAccepted at
// schema version 2 for tenant: what a usage release that upgraded its
// contract ahead of its consumers would send. Consumers that know only
// version 1 quarantine it as unsupported_schema. It returns the event id.
func InjectUsageV2(brokers []string, tenant, meterCode, currency string, priceVersion int64, quantity decimal.Decimal) (uuid.UUID, error) {
	usageID, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, err
	}
	now := time.Now()
	ev, err := envelope.New(envelope.Meta{
		EventType: events.TypeUsageAccepted, SchemaVersion: 2, TenantID: tenant,
		AggregateType: events.AggregateUsage, AggregateID: usageID.String(), AggregateVersion: 1,
		OccurredAt: now, Producer: "usage",
	}, events.UsageAccepted{
		UsageID: usageID, SourceSystem: "demo-v2", SourceEventID: usageID.String(), MeterCode: meterCode,
		Quantity: quantity, OccurredAt: now, Currency: currency, PriceVersion: priceVersion,
	})
	if err != nil {
		return uuid.Nil, err
	}
	body, err := ev.Marshal()
	if err != nil {
		return uuid.Nil, err
	}
	p, err := sarama.NewSyncProducer(brokers, kafkaconf.NewIdempotentProducer("demo-injector"))
	if err != nil {
		return uuid.Nil, fmt.Errorf("inject: %w", err)
	}
	defer p.Close()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{
		Topic: events.TopicUsage, Key: sarama.StringEncoder(ev.PartitionKey), Value: sarama.ByteEncoder(body),
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("inject: %w", err)
	}
	return ev.EventID, nil
}
