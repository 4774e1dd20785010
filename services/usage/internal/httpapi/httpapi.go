// Package httpapi maps the usage service's HTTP API onto its commands, and
// domain errors onto problem responses.
package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// Request limits.
const (
	MaxBatch     = 1000
	maxBatchBody = 2 << 20
)

// API serves the usage service's HTTP endpoints.
type API struct {
	app *app.App
	log *slog.Logger
}

// New returns the API over a.
func New(a *app.App, log *slog.Logger) *API { return &API{app: a, log: log} }

// Routes mounts the endpoints on r. chi matches "usage:batch" as a static
// segment of its own, apart from "usage" and "usage/{usageId}".
func (api *API) Routes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/usage", auth.Allow(api.accept, auth.RoleIngest))
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/usage:batch", auth.Allow(api.acceptBatch, auth.RoleIngest))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/usage/{usageId}", auth.Allow(api.get, auth.RoleIngest))
	// The tenant of a CloudEvent is its subject, in the body: the handler
	// decides access per event (ingestAccess), so the route is open to
	// the guard; auth.Middleware still demands a valid bearer.
	r.Method(http.MethodPost, "/v1/events", auth.AllowAnyTenant(api.ingestEvents, auth.RoleIngest, auth.RolePlatformIngest))
	r.Method(http.MethodPost, "/api/v1/events", auth.AllowAnyTenant(api.ingestEvents, auth.RoleIngest, auth.RolePlatformIngest))
	r.Method(http.MethodGet, "/openapi.json", usageapi.Handler())
}

// usageRequest is one usage fact as sent. quantity is raw so that a JSON
// number is refused as invalid_quantity rather than as a type error.
type usageRequest struct {
	SourceSystem  string          `json:"sourceSystem"`
	SourceEventID string          `json:"sourceEventId"`
	MeterCode     string          `json:"meterCode"`
	Quantity      json.RawMessage `json:"quantity"`
	OccurredAt    string          `json:"occurredAt"`
	Currency      string          `json:"currency"`
	Properties    json.RawMessage `json:"properties"`
}

// parse checks the request: a problem is the answer to it, alone or as its
// result in a batch.
func (r usageRequest) parse(now time.Time) (domain.Usage, *httpx.Problem) {
	qty, p := httpx.DecimalText("quantity", domain.CodeInvalidQuantity, r.Quantity)
	if p != nil {
		return domain.Usage{}, p
	}
	props, p := properties(r.Properties)
	if p != nil {
		return domain.Usage{}, p
	}
	u, err := domain.Parse(domain.Request{
		SourceSystem: r.SourceSystem, SourceEventID: r.SourceEventID, MeterCode: r.MeterCode,
		Quantity: qty, OccurredAt: r.OccurredAt, Currency: r.Currency, Properties: props,
	}, now)
	if err != nil {
		return domain.Usage{}, httpx.RuleProblem(err)
	}
	return u, nil
}

// accepted is the body of 201 and of its replay, 200.
// The price version is not usage's to say: billing decides it (decision
// 0011).
type accepted struct {
	UsageID uuid.UUID `json:"usageId"`
	EventID uuid.UUID `json:"eventId"`
}

func (api *API) accept(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	correlationID, p := httpx.CorrelationID(r, false)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var req usageRequest
	if p := httpx.DecodeJSON(w, r, &req, httpx.MaxCommandBody); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	u, p := req.parse(api.app.Now())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	res, err := api.app.Accept(r.Context(), tenant, correlationID, []domain.Usage{u})
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	switch x := res[0]; x.Outcome {
	case app.Created, app.Replayed:
		httpx.WriteJSON(w, statusOf(x), accepted{UsageID: x.UsageID, EventID: x.EventID})
	default:
		httpx.WriteProblem(w, httpx.RuleProblem(x.Err))
	}
}

type batchRequest struct {
	Events []usageRequest `json:"events"`
}

// batchResult is the decision on one event of a batch; status is the HTTP
// status the event would have had on its own, code the problem code when it
// was refused.
type batchResult struct {
	Status  int    `json:"status"`
	UsageID string `json:"usageId,omitempty"`
	EventID string `json:"eventId,omitempty"`
	Code    string `json:"code,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

func (api *API) acceptBatch(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	correlationID, p := httpx.CorrelationID(r, false)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var req batchRequest
	if p := httpx.DecodeJSON(w, r, &req, maxBatchBody); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	switch n := len(req.Events); {
	case n == 0:
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "missing_field", `field "events" must hold 1 to 1000 usage events`))
		return
	case n > MaxBatch:
		httpx.WriteProblem(w, httpx.Problemf(http.StatusBadRequest, "batch_too_large", "%d events: a batch holds at most %d", n, MaxBatch))
		return
	}
	results := make([]batchResult, len(req.Events))
	valid := make([]domain.Usage, 0, len(req.Events))
	at := make([]int, 0, len(req.Events)) // request index of each valid event
	now := api.app.Now()
	for i, e := range req.Events {
		u, p := e.parse(now)
		if p != nil {
			results[i] = refused(p)
			continue
		}
		valid = append(valid, u)
		at = append(at, i)
	}
	if len(valid) > 0 {
		res, err := api.app.Accept(r.Context(), tenant, correlationID, valid)
		if err != nil {
			httpx.WriteError(w, r, api.log, err)
			return
		}
		for j, x := range res {
			if x.Outcome == app.Refused {
				results[at[j]] = refused(httpx.RuleProblem(x.Err))
				continue
			}
			results[at[j]] = batchResult{Status: statusOf(x), UsageID: x.UsageID.String(), EventID: x.EventID.String()}
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string][]batchResult{"results": results})
}

// fact is a usage fact as the API shows it.
type fact struct {
	UsageID       uuid.UUID         `json:"usageId"`
	TenantID      string            `json:"tenantId"`
	SourceSystem  string            `json:"sourceSystem"`
	SourceEventID string            `json:"sourceEventId"`
	MeterCode     string            `json:"meterCode"`
	Quantity      decimal.Decimal   `json:"quantity"`
	OccurredAt    time.Time         `json:"occurredAt"`
	Currency      string            `json:"currency"`
	Properties    map[string]string `json:"properties"`
	EventID       uuid.UUID         `json:"eventId"`
	AcceptedAt    time.Time         `json:"acceptedAt"`
}

func (api *API) get(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	notFound := httpx.NewProblem(http.StatusNotFound, "not_found", "no such usage fact")
	id, ok := httpx.ParseUUID(chi.URLParam(r, "usageId"))
	if !ok {
		httpx.WriteProblem(w, notFound)
		return
	}
	f, err := api.app.Fact(r.Context(), tenant, id)
	if errors.Is(err, app.ErrNotFound) {
		httpx.WriteProblem(w, notFound)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, fact{
		UsageID: f.UsageID, TenantID: f.TenantID, SourceSystem: f.SourceSystem, SourceEventID: f.SourceEventID,
		MeterCode: f.MeterCode, Quantity: f.Quantity, OccurredAt: f.OccurredAt, Currency: f.Currency,
		Properties: nonNil(f.Properties), EventID: f.EventID, AcceptedAt: f.AcceptedAt,
	})
}

func statusOf(x app.Result) int {
	if x.Outcome == app.Created {
		return http.StatusCreated
	}
	return http.StatusOK
}

// refused is the result of a batch's event that p refuses.
func refused(p *httpx.Problem) batchResult {
	return batchResult{Status: p.Status, Code: p.Code, Detail: p.Detail}
}
