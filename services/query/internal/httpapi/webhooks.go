package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/query/internal/operator"
)

// intentStatuses are the statuses a webhook intent can be listed by.
var intentStatuses = []string{"pending", "leased", "accepted", "failed", "expired"}

// WebhookOperator serves the operator's view of the invoice service's
// webhook intents (auth.Middleware admits only operators to /v1/operator/):
//
//	GET  /v1/operator/webhook-intents?status=&tenantId=&limit=&cursor= -> {items, next}
//	GET  /v1/operator/webhook-intents/stats -> {byStatus, oldestPendingAgeSeconds}
//	POST /v1/operator/webhook-intents/{intentId}/retry {reason} + X-Correlation-Id
//	     -> {redriveId, state, outcome, intentStatus}
type WebhookOperator struct {
	hooks *operator.Webhooks
	log   *slog.Logger
}

// NewWebhookOperator returns the API over hooks.
func NewWebhookOperator(hooks *operator.Webhooks, log *slog.Logger) *WebhookOperator {
	return &WebhookOperator{hooks: hooks, log: log}
}

// Routes mounts the endpoints on r.
func (a *WebhookOperator) Routes(r chi.Router) {
	r.Method(http.MethodGet, "/v1/operator/webhook-intents", auth.Allow(a.list, auth.RoleOperator))
	r.Method(http.MethodGet, "/v1/operator/webhook-intents/stats", auth.Allow(a.stats, auth.RoleOperator))
	r.Method(http.MethodPost, "/v1/operator/webhook-intents/{intentId}/retry", auth.Allow(a.retry, auth.RoleOperator))
}

// list: the intents oldest first, of one status and tenant when given, a
// page at a time (pkg/page; the cursor is the invoice service's).
func (a *WebhookOperator) list(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	q := url.Values{}
	if s := in.Get("status"); s != "" {
		if !slices.Contains(intentStatuses, s) {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_status",
				"status must be pending, leased, accepted, failed or expired"))
			return
		}
		q.Set("status", s)
	}
	if t := in.Get("tenantId"); t != "" {
		if _, p := httpx.TenantID(t); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		q.Set("tenantId", t)
	}
	req, p := page.Parse(in)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	q.Set("limit", strconv.Itoa(req.Limit))
	if c := in.Get("cursor"); c != "" {
		q.Set("cursor", c)
	}
	out, err := a.hooks.List(r.Context(), q)
	if err != nil {
		a.fail(w, r, "list webhook intents", err)
		return
	}
	if out.Items == nil {
		out.Items = []json.RawMessage{}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// stats: counts by status and the oldest pending intent's age.
func (a *WebhookOperator) stats(w http.ResponseWriter, r *http.Request) {
	s, err := a.hooks.Stats(r.Context())
	if err != nil {
		a.fail(w, r, "read webhook intent stats", err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, s)
}

// retry: an audited retry of a failed or expired intent (redrive_audit,
// action retry_webhook_intent). Synchronous: the answer has the outcome.
func (a *WebhookOperator) retry(w http.ResponseWriter, r *http.Request) {
	corr, p := httpx.CorrelationID(r, true)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	id, ok := httpx.ParseUUID(chi.URLParam(r, "intentId"))
	if !ok {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_intent_id", "intentId must be a UUID in its canonical form, not the nil UUID"))
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if p := httpx.DecodeJSON(w, r, &body, 0); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if p := httpx.Required("reason", body.Reason); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if utf8.RuneCountInString(body.Reason) > MaxReason {
		httpx.WriteProblem(w, httpx.Problemf(http.StatusBadRequest, "invalid_field", "reason is longer than %d characters", MaxReason))
		return
	}
	if p := httpx.FreeText("reason", body.Reason); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	res, err := a.hooks.Retry(r.Context(), operator.RetryRequest{IntentID: id, Reason: body.Reason,
		Actor: actor, CorrelationID: corr})
	if res.RedriveID != uuid.Nil {
		w.Header().Set("Location", "/v1/operator/redrives/"+res.RedriveID.String())
	}
	if err != nil {
		a.fail(w, r, "retry webhook intent", err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"redriveId": res.RedriveID, "state": res.State,
		"outcome": res.Outcome, "intentStatus": res.IntentStatus})
}

func (a *WebhookOperator) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	var p *httpx.Problem
	if up, ok := operator.IsUpstreamProblem(err); ok {
		p = httpx.NewProblem(up.Status, up.Code, up.Detail)
	} else if errors.Is(err, operator.ErrUpstream) {
		p = httpx.NewProblem(http.StatusBadGateway, "service_unavailable", err.Error())
	} else {
		p = httpx.StoreError(err)
	}
	if p.Status >= 500 {
		a.log.ErrorContext(r.Context(), what, "err", err, "status", p.Status)
	}
	httpx.WriteProblem(w, p)
}
