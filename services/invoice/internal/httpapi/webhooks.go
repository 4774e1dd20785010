package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
)

// Webhooks serves a tenant's webhook endpoints and, for query's operator
// API, the delivery intents:
//
//	POST   /v1/tenants/{tenantId}/webhook-endpoints {url} -> 201 {endpointId, url, secret, createdAt, createdBy}
//	GET    /v1/tenants/{tenantId}/webhook-endpoints?limit=&cursor= -> {endpoints, next}
//	DELETE /v1/tenants/{tenantId}/webhook-endpoints/{endpointId} -> 204
//	GET    /internal/v1/webhook-intents?status=&tenantId=&limit=&cursor= -> {items, next}
//	GET    /internal/v1/webhook-intents/stats -> {byStatus, oldestPendingAgeSeconds}
//	GET    /internal/v1/webhook-intents/{intentId} -> {intentId, status}
//	POST   /internal/v1/webhook-intents/{intentId}/retry {actor, correlationId, reason} -> {intentId, outcome, status}
//
// An intent id that names no intent is 404 webhook_intent_not_found.
//
// The endpoint routes take a billing-admin token for the tenant; the
// internal routes a service token (query's operator calls).
type Webhooks struct {
	endpoints *webhook.Endpoints
	store     *webhook.Store
	log       *slog.Logger
}

// NewWebhooks returns the webhook API.
func NewWebhooks(endpoints *webhook.Endpoints, store *webhook.Store, log *slog.Logger) *Webhooks {
	return &Webhooks{endpoints: endpoints, store: store, log: log}
}

// Routes mounts the endpoints on r.
func (a *Webhooks) Routes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/webhook-endpoints", auth.Allow(a.create, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/webhook-endpoints", auth.Allow(a.list, auth.RoleBillingAdmin))
	r.Method(http.MethodDelete, "/v1/tenants/{tenantId}/webhook-endpoints/{endpointId}", auth.Allow(a.delete, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/internal/v1/webhook-intents", auth.Allow(a.intents, auth.RoleService))
	r.Method(http.MethodGet, "/internal/v1/webhook-intents/stats", auth.Allow(a.stats, auth.RoleService))
	r.Method(http.MethodGet, "/internal/v1/webhook-intents/{intentId}", auth.Allow(a.intent, auth.RoleService))
	r.Method(http.MethodPost, "/internal/v1/webhook-intents/{intentId}/retry", auth.Allow(a.retry, auth.RoleService))
}

// CodeIntentNotFound: the intent id names no webhook intent (404).
const CodeIntentNotFound = "webhook_intent_not_found"

func intentNotFound() *httpx.Problem {
	return httpx.NewProblem(http.StatusNotFound, CodeIntentNotFound, "no webhook intent with that id")
}

// intentID reads the route's {intentId}: a UUID in its canonical form, not
// nil (400 invalid_intent_id).
func intentID(r *http.Request) (uuid.UUID, *httpx.Problem) {
	id, ok := httpx.ParseUUID(chi.URLParam(r, "intentId"))
	if !ok {
		return uuid.Nil, httpx.NewProblem(http.StatusBadRequest, "invalid_intent_id", "intent id must be a UUID in its canonical form, not the nil UUID")
	}
	return id, nil
}

// intent: GET /internal/v1/webhook-intents/{intentId}: whether the intent
// exists and its status (query checks before it audits a retry).
func (a *Webhooks) intent(w http.ResponseWriter, r *http.Request) {
	id, p := intentID(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	status, found, err := a.store.Status(r.Context(), id)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	if !found {
		httpx.WriteProblem(w, intentNotFound())
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"intentId": id, "status": status})
}

type endpointJSON struct {
	EndpointID uuid.UUID `json:"endpointId"`
	URL        string    `json:"url"`
	Secret     string    `json:"secret,omitempty"` // in the POST answer only
	CreatedBy  string    `json:"createdBy"`
	CreatedAt  time.Time `json:"createdAt"`
}

// create: POST /v1/tenants/{tenantId}/webhook-endpoints {url}. The answer
// is the only one that carries the signing secret.
func (a *Webhooks) create(w http.ResponseWriter, r *http.Request) {
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var body struct {
		URL string `json:"url"`
	}
	if p := httpx.DecodeJSON(w, r, &body, 0); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if p := httpx.Required("url", body.URL); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	claims, _ := auth.FromContext(r.Context())
	ep, err := a.endpoints.Create(r.Context(), tenantID, body.URL, claims.Actor())
	var invalid *webhook.InvalidURLError
	switch {
	case errors.As(err, &invalid):
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_url", invalid.Error()))
		return
	case errors.Is(err, webhook.ErrAddressRefused):
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnprocessableEntity, "endpoint_address_refused", err.Error()))
		return
	case errors.Is(err, webhook.ErrHTTPSRequired):
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnprocessableEntity, "https_required", err.Error()))
		return
	case errors.Is(err, webhook.ErrTooManyEndpoints):
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnprocessableEntity, "limit_exceeded", err.Error()))
		return
	case err != nil:
		httpx.WriteError(w, r, a.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", "/v1/tenants/"+tenantID+"/webhook-endpoints/"+ep.ID.String())
	httpx.WriteJSON(w, http.StatusCreated, endpointJSON{EndpointID: ep.ID, URL: ep.URL, Secret: ep.Secret,
		CreatedBy: ep.CreatedBy, CreatedAt: ep.CreatedAt})
}

// idCursor is the position a page of endpoints or intents ends at.
type idCursor struct {
	ID uuid.UUID `json:"id"`
}

// list: GET /v1/tenants/{tenantId}/webhook-endpoints?limit=&cursor=, in
// creation order, without secrets.
func (a *Webhooks) list(w http.ResponseWriter, r *http.Request) {
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after idCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	eps, err := a.endpoints.List(r.Context(), tenantID, after.ID, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	eps, next := page.Cut(req, eps, func(e webhook.Endpoint) any { return idCursor{ID: e.ID} })
	out := struct {
		Endpoints []endpointJSON `json:"endpoints"`
		Next      *string        `json:"next,omitempty"`
	}{Endpoints: make([]endpointJSON, len(eps)), Next: next}
	for i, e := range eps {
		out.Endpoints[i] = endpointJSON{EndpointID: e.ID, URL: e.URL, CreatedBy: e.CreatedBy, CreatedAt: e.CreatedAt}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// delete: DELETE /v1/tenants/{tenantId}/webhook-endpoints/{endpointId}.
// Its intents not yet delivered become failed (endpoint_deleted).
func (a *Webhooks) delete(w http.ResponseWriter, r *http.Request) {
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	id, err := uuid.Parse(chi.URLParam(r, "endpointId"))
	if err != nil {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_endpoint_id", "endpoint id must be a UUID"))
		return
	}
	err = a.endpoints.Delete(r.Context(), tenantID, id)
	switch {
	case errors.Is(err, webhook.ErrNotFound):
		httpx.WriteProblem(w, httpx.Problemf(http.StatusNotFound, "not_found", "tenant %s has no webhook endpoint %s", tenantID, id))
	case err != nil:
		httpx.WriteError(w, r, a.log, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// IntentJSON is an intent as the internal list shows it (and query's
// operator API passes on).
type IntentJSON struct {
	IntentID        uuid.UUID  `json:"intentId"`
	EndpointID      uuid.UUID  `json:"endpointId"`
	URL             string     `json:"url"`
	TenantID        string     `json:"tenantId"`
	WebhookID       string     `json:"webhookId"` // the idempotency key
	EventID         uuid.UUID  `json:"eventId"`
	EventType       string     `json:"eventType"`
	Status          string     `json:"status"`
	Attempts        int32      `json:"attempts"`
	CreatedAt       time.Time  `json:"createdAt"`
	NotBefore       time.Time  `json:"notBefore"`
	ExpiresAt       time.Time  `json:"expiresAt"`
	FirstAttemptAt  *time.Time `json:"firstAttemptAt"`
	LastAttemptAt   *time.Time `json:"lastAttemptAt"`
	LastStatusCode  *int32     `json:"lastStatusCode"`
	LastError       string     `json:"lastError,omitempty"`
	ResponseRef     string     `json:"responseRef,omitempty"`
	FinishedAt      *time.Time `json:"finishedAt"`
	OperatorRetries int32      `json:"operatorRetries"`
}

// intents: GET /internal/v1/webhook-intents?status=&tenantId=&limit=&cursor=.
func (a *Webhooks) intents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := webhook.Filter{Status: q.Get("status"), TenantID: q.Get("tenantId")}
	if f.Status != "" && !slices.Contains(webhook.Statuses, f.Status) {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_status",
			"status must be pending, leased, accepted, failed or expired"))
		return
	}
	if f.TenantID != "" {
		if _, p := httpx.TenantID(f.TenantID); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
	}
	req, p := page.Parse(q)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after idCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	f.After, f.Limit = after.ID, req.Fetch()
	items, err := a.store.List(r.Context(), f)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	items, next := page.Cut(req, items, func(i webhook.Intent) any { return idCursor{ID: i.ID} })
	out := struct {
		Items []IntentJSON `json:"items"`
		Next  *string      `json:"next,omitempty"`
	}{Items: make([]IntentJSON, len(items)), Next: next}
	for i, it := range items {
		out.Items[i] = IntentJSON{IntentID: it.ID, EndpointID: it.EndpointID, URL: it.URL, TenantID: it.TenantID,
			WebhookID: it.IdempotencyKey, EventID: it.EventID, EventType: it.EventType, Status: it.Status,
			Attempts: it.Attempts, CreatedAt: it.CreatedAt, NotBefore: it.NotBefore, ExpiresAt: it.ExpiresAt,
			FirstAttemptAt: it.FirstAttemptAt, LastAttemptAt: it.LastAttemptAt, LastStatusCode: it.LastStatusCode,
			LastError: it.LastError, ResponseRef: it.ResponseRef, FinishedAt: it.FinishedAt,
			OperatorRetries: it.OperatorRetries}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// stats: GET /internal/v1/webhook-intents/stats.
func (a *Webhooks) stats(w http.ResponseWriter, r *http.Request) {
	s, err := a.store.Stats(r.Context())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"byStatus": s.ByStatus, "oldestPendingAgeSeconds": s.OldestPendingAgeSeconds})
}

// retry: POST /internal/v1/webhook-intents/{intentId}/retry {actor,
// correlationId, reason}: a failed or expired intent becomes pending and
// due; no such intent is 404 webhook_intent_not_found. Query audits the
// request; the invoice service logs who asked.
func (a *Webhooks) retry(w http.ResponseWriter, r *http.Request) {
	id, p := intentID(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var body struct {
		Actor         string `json:"actor"`
		CorrelationID string `json:"correlationId"`
		Reason        string `json:"reason"`
	}
	if p := httpx.DecodeJSON(w, r, &body, 0); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if p := httpx.Required("actor", body.Actor, "correlationId", body.CorrelationID, "reason", body.Reason); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if !httpx.ValidCorrelationID(body.CorrelationID) || utf8.RuneCountInString(body.Reason) > 500 {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_field",
			"correlationId must be 1-128 printable ASCII characters and reason at most 500 characters"))
		return
	}
	for _, f := range [][2]string{{"actor", body.Actor}, {"reason", body.Reason}} {
		if p := httpx.FreeText(f[0], f[1]); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
	}
	outcome, status, err := a.store.Retry(r.Context(), id)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	if outcome == webhook.RetryNotFound {
		httpx.WriteProblem(w, intentNotFound())
		return
	}
	claims, _ := auth.FromContext(r.Context())
	a.log.InfoContext(r.Context(), "webhook intent retry", "intent_id", id, "outcome", outcome, "status", status,
		"actor", body.Actor, "caller", claims.Actor(), "correlation_id", body.CorrelationID, "reason", body.Reason)
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"intentId": id, "outcome": outcome, "status": status})
}
