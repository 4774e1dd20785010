// Package httpapi is the query service's HTTP API (pkg/api/queryapi/openapi.yaml): the
// tenant summary and usage analytics (API) and the operator API (Operator). Handlers map
// requests to the app and operator packages and their errors to problems.
package httpapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/query/internal/app"
)

// API serves the query endpoints.
type API struct {
	reader *app.App
	log    *slog.Logger
}

// New returns the API reading through the App.
func New(reader *app.App, log *slog.Logger) *API {
	return &API{reader: reader, log: log}
}

// Routes mounts the endpoints on r.
func (a *API) Routes(r chi.Router) {
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/summary", auth.Allow(a.summary, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/meters/{meterCode}/usage", auth.Allow(a.usage, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/periods/{period}/charge-facts", auth.Allow(a.chargeFacts, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/late-usage", auth.Allow(a.lateUsage, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/openapi.json", queryapi.Handler())
}

type summaryJSON struct {
	TenantID    string                     `json:"tenantId"`
	Usage       usageJSON                  `json:"usage"`
	Charged     map[string]decimal.Decimal `json:"charged"`
	Adjusted    map[string]decimal.Decimal `json:"adjusted"`
	Invoiced    map[string]decimal.Decimal `json:"invoiced"`
	LastEventAt *time.Time                 `json:"lastEventAt"`
}

type usageJSON struct {
	Count           int64                      `json:"count"`
	QuantityByMeter map[string]decimal.Decimal `json:"quantityByMeter"`
}

// summary: GET /v1/tenants/{tenantId}/summary. A tenant the service has seen
// no event of gets 200 with zeros and a null lastEventAt: the query service
// keeps no tenant registry, so "unknown" and "no activity yet" are the same.
func (a *API) summary(w http.ResponseWriter, r *http.Request) {
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	s, err := a.reader.Summary(r.Context(), tenantID)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, summaryJSON{
		TenantID:    s.TenantID,
		Usage:       usageJSON{Count: s.UsageCount, QuantityByMeter: s.QuantityByMeter},
		Charged:     s.Charged,
		Adjusted:    s.Adjusted,
		Invoiced:    s.Invoiced,
		LastEventAt: s.LastEventAt,
	})
}
