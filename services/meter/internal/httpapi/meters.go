package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

// catalogReaders are the roles that read the catalog. DESIGN.md section 7
// says any role reads it, but pkg/auth admits a tenant-scoped role (ingest,
// viewer, billing-admin) only on a route of its own {tenantId} (auth.Check
// refuses one on a route without), so /v1/meters admits the roles that are
// not tenant-scoped and read: catalog-admin, operator and service.
// platform-ingest sends usage and reads nothing (section 8).
var catalogReaders = []string{auth.RoleCatalogAdmin, auth.RoleOperator, auth.RoleService,
	auth.RoleViewer, auth.RoleBillingAdmin, auth.RoleIngest}

// defineMeterRequest is {code, name, aggregation, valueProperty,
// dimensions, eventType}.
type defineMeterRequest struct {
	Code          string   `json:"code"`
	Name          string   `json:"name"`
	Aggregation   string   `json:"aggregation"`
	ValueProperty string   `json:"valueProperty"`
	Dimensions    []string `json:"dimensions"`
	EventType     string   `json:"eventType"`
}

// defineMeter: POST /v1/meters (Idempotency-Key) -> 201 Meter; the same
// definition again 200 Meter; 409 meter_exists, event_type_taken.
func (api *API) defineMeter(w http.ResponseWriter, r *http.Request) {
	var req defineMeterRequest
	cmd, p := httpx.ReadCommand(w, r, &req)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	m, err := domain.ParseMeter(domain.MeterRequest{Code: req.Code, Name: req.Name, Aggregation: req.Aggregation,
		ValueProperty: req.ValueProperty, Dimensions: req.Dimensions, EventType: req.EventType})
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	rc, err := api.idempotent(r.Context(), metersScope, cmd, func(tx pgx.Tx) (int, any, error) {
		meter, created, err := api.app.DefineMeter(r.Context(), tx, app.DefineMeter{Meter: m, CorrelationID: cmd.CorrelationID, Actor: actor})
		if !created {
			return http.StatusOK, meter, err // the same definition again
		}
		return http.StatusCreated, meter, err
	})
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	httpx.WriteReply(w, rc)
}

// getMeter: GET /v1/meters/{code} -> Meter; 404 meter_not_found.
func (api *API) getMeter(w http.ResponseWriter, r *http.Request) {
	code := chi.URLParam(r, "code")
	if err := domain.CheckCode(code); err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	m, err := api.app.GetMeter(r.Context(), code)
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, m)
}

// meterCursor is the code a page of meters ends at.
type meterCursor struct {
	Code string `json:"c"`
}

type listMetersResponse struct {
	Meters []app.Meter `json:"meters"`
	Next   *string     `json:"next,omitempty"`
}

// listMeters: GET /v1/meters?limit=&cursor= -> {meters, next}, in code
// order; next is absent on the last page.
func (api *API) listMeters(w http.ResponseWriter, r *http.Request) {
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after meterCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	meters, err := api.app.ListMeters(r.Context(), after.Code, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	meters, next := page.Cut(req, meters, func(m app.Meter) any { return meterCursor{Code: m.Code} })
	if meters == nil {
		meters = []app.Meter{}
	}
	httpx.WriteJSON(w, http.StatusOK, listMetersResponse{Meters: meters, Next: next})
}
