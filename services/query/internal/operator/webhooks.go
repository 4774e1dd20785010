package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/query/internal/db"
)

// ActionRetryWebhookIntent is the audit action of an operator's retry of a
// webhook intent.
const ActionRetryWebhookIntent = "retry_webhook_intent"

// RetryNotFound is the outcome audited when the intent went away between
// the check and the retry.
const RetryNotFound = "not_found"

// WebhookService is the service that owns the webhook intents.
const WebhookService = "invoice"

// UpstreamProblem is a problem a service's internal API answered (a 4xx
// about the request, passed on to the operator).
type UpstreamProblem struct {
	Service string
	Status  int
	Code    string
	Detail  string
}

func (p *UpstreamProblem) Error() string {
	return fmt.Sprintf("%s answered %d %s: %s", p.Service, p.Status, p.Code, p.Detail)
}

// Webhooks is the operator's view of the invoice service's webhook intents
// and the audited retry of one, through the invoice service's
// /internal/v1/webhook-intents endpoints.
type Webhooks struct {
	pool    *pgxpool.Pool
	invoice serviceClient
	log     *slog.Logger
}

// NewWebhooks returns the view, calling the invoice service at base with
// service tokens signed by keys, and auditing in pool.
func NewWebhooks(pool *pgxpool.Pool, base string, keys auth.Keys, log *slog.Logger) *Webhooks {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Webhooks{pool: pool, invoice: newServiceClient(WebhookService, base, keys), log: log}
}

// IntentPage is a page of intents as the invoice service lists them
// (passed on as they are) and the cursor of the next.
type IntentPage struct {
	Items []json.RawMessage `json:"items"`
	Next  *string           `json:"next,omitempty"`
}

// IntentStats are the intents' counts by status and the oldest open age.
type IntentStats struct {
	ByStatus                map[string]int64 `json:"byStatus"`
	OldestPendingAgeSeconds float64          `json:"oldestPendingAgeSeconds"`
}

// List reads a page of intents; q holds status, tenantId, limit, cursor.
func (w *Webhooks) List(ctx context.Context, q url.Values) (IntentPage, error) {
	var out IntentPage
	return out, w.invoice.call(ctx, http.MethodGet, "/internal/v1/webhook-intents", q, nil, &out)
}

// Stats reads the counts by status and the oldest pending age.
func (w *Webhooks) Stats(ctx context.Context) (IntentStats, error) {
	var out IntentStats
	return out, w.invoice.call(ctx, http.MethodGet, "/internal/v1/webhook-intents/stats", nil, nil, &out)
}

// RetryRequest is an operator's retry of a webhook intent.
type RetryRequest struct {
	IntentID      uuid.UUID
	Reason        string
	Actor         string // from the credential
	CorrelationID string
}

// RetryResult is the audited retry: its redrive id (GET
// /v1/operator/redrives/{id} shows its audit), the outcome and the intent's
// status after it.
type RetryResult struct {
	RedriveID    uuid.UUID
	State        string
	Outcome      string
	IntentStatus string
}

// Retry checks that the intent exists (an unknown one is the invoice
// service's 404 webhook_intent_not_found, an *UpstreamProblem, and nothing
// is written), audits the request ('requested': actor, correlation id,
// reason), asks the invoice service to make the intent pending again, and
// audits its answer ('completed' with the outcome; not_found when the
// intent went away in between). When the invoice service cannot be reached
// after the check the audit stays 'requested' and the error says so; asking
// again is safe (a rescheduled intent is not_retryable).
func (w *Webhooks) Retry(ctx context.Context, req RetryRequest) (RetryResult, error) {
	var found struct {
		Status string `json:"status"`
	}
	if err := w.invoice.call(ctx, http.MethodGet, "/internal/v1/webhook-intents/"+req.IntentID.String(), nil, nil, &found); err != nil {
		return RetryResult{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return RetryResult{}, fmt.Errorf("new redrive id: %w", err)
	}
	if err := w.audit(ctx, id, req, StateRequested, "", req.Actor); err != nil {
		return RetryResult{}, err
	}
	w.log.InfoContext(ctx, "webhook intent retry requested", "redrive_id", id, "intent_id", req.IntentID,
		"actor", req.Actor, "correlation_id", req.CorrelationID)
	var answer struct {
		Outcome string `json:"outcome"`
		Status  string `json:"status"`
	}
	body := map[string]string{"actor": req.Actor, "correlationId": req.CorrelationID, "reason": req.Reason}
	if err := w.invoice.call(ctx, http.MethodPost, "/internal/v1/webhook-intents/"+req.IntentID.String()+"/retry", nil, body, &answer); err != nil {
		if up, ok := IsUpstreamProblem(err); ok && up.Status == http.StatusNotFound {
			if aerr := w.audit(ctx, id, req, StateCompleted, RetryNotFound, "service:"+WebhookService); aerr != nil {
				return RetryResult{RedriveID: id, State: StateRequested}, aerr
			}
			return RetryResult{RedriveID: id, State: StateCompleted, Outcome: RetryNotFound}, err
		}
		return RetryResult{RedriveID: id, State: StateRequested}, err
	}
	if err := w.audit(ctx, id, req, StateCompleted, answer.Outcome, "service:"+WebhookService); err != nil {
		return RetryResult{RedriveID: id, State: StateRequested}, err
	}
	return RetryResult{RedriveID: id, State: StateCompleted, Outcome: answer.Outcome, IntentStatus: answer.Status}, nil
}

// audit appends one state of a retry to redrive_audit (append-only).
func (w *Webhooks) audit(ctx context.Context, id uuid.UUID, req RetryRequest, state, outcome, actor string) error {
	source, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new audit source id: %w", err)
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		err := db.New(tx).AppendRedriveAudit(ctx, db.AppendRedriveAuditParams{
			RedriveID: id, Service: WebhookService, EventID: req.IntentID, Action: ActionRetryWebhookIntent,
			State: state, Outcome: pgtype.Text{String: outcome, Valid: outcome != ""}, Actor: actor,
			CorrelationID: req.CorrelationID, Reason: req.Reason, SourceEventID: source,
		})
		if err != nil {
			return fmt.Errorf("audit webhook intent retry %s: %w", id, err)
		}
		return nil
	})
}

// serviceClient calls one service's internal API (/internal/v1/...).
type serviceClient struct {
	service string
	base    string // the service's base URL ("" when not configured)
	keys    auth.Keys
	hc      *http.Client
}

func newServiceClient(service, base string, keys auth.Keys) serviceClient {
	return serviceClient{service: service, base: strings.TrimRight(base, "/"), keys: keys, hc: &http.Client{Timeout: 10 * time.Second}}
}

// call makes one request to the service's internal API with a one-minute
// service token signed with query's own key. A 4xx problem is an
// *UpstreamProblem; any other failure wraps ErrUpstream.
func (c serviceClient) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	if c.base == "" {
		return fmt.Errorf("%w: no URL for %s in SERVICE_URLS", ErrUpstream, c.service)
	}
	token, err := c.keys.ServiceToken(Self, c.service)
	if err != nil {
		return err
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUpstream, c.service, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUpstream, c.service, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%w: %s: read answer: %w", ErrUpstream, c.service, err)
	}
	if resp.StatusCode != http.StatusOK {
		var p httpx.Problem
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && json.Unmarshal(raw, &p) == nil && p.Code != "" {
			return &UpstreamProblem{Service: c.service, Status: resp.StatusCode, Code: p.Code, Detail: p.Detail}
		}
		return fmt.Errorf("%w: %s %s: status %d", ErrUpstream, c.service, path, resp.StatusCode)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: %s %s: decode answer: %w", ErrUpstream, c.service, path, err)
	}
	return nil
}

// IsUpstreamProblem reports whether err is a problem a service's internal
// API answered about the request, and returns it.
func IsUpstreamProblem(err error) (*UpstreamProblem, bool) {
	var p *UpstreamProblem
	ok := errors.As(err, &p)
	return p, ok
}
