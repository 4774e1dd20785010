// Package httpapi maps the meter's HTTP API onto its commands, and domain
// errors onto problem responses.
package httpapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

// API serves the meter's HTTP endpoints.
type API struct {
	app *app.App
	log *slog.Logger
}

// New returns the API over a.
func New(a *app.App, log *slog.Logger) *API { return &API{app: a, log: log} }

// Routes mounts the endpoints on r.
func (api *API) Routes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/prices", auth.Allow(api.activatePrice, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/prices", auth.Allow(api.listPrices, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodPost, "/v1/meters", auth.Allow(api.defineMeter, auth.RoleCatalogAdmin))
	r.Method(http.MethodGet, "/v1/meters", auth.AllowAnyTenant(api.listMeters, catalogReaders...))
	r.Method(http.MethodGet, "/v1/meters/{code}", auth.AllowAnyTenant(api.getMeter, catalogReaders...))
	r.Method(http.MethodPost, "/v1/plans", auth.Allow(api.publishPlan, auth.RoleCatalogAdmin))
	r.Method(http.MethodGet, "/v1/plans", auth.AllowAnyTenant(api.listPlans, catalogReaders...))
	r.Method(http.MethodGet, "/v1/plans/{code}/versions", auth.AllowAnyTenant(api.listPlanVersions, catalogReaders...))
	r.Method(http.MethodGet, "/openapi.json", meterapi.Handler())
}

// activatePriceRequest is {meterCode, currency, unitPrice, effectiveAt} or,
// for the other models, {meterCode, currency, model, tiers: [{upTo,
// unitPrice, flatFee}], packageSize, packagePrice, effectiveAt}. Decimals
// are JSON strings.
type activatePriceRequest struct {
	MeterCode    string            `json:"meterCode"`
	Currency     string            `json:"currency"`
	Model        string            `json:"model"`
	UnitPrice    json.RawMessage   `json:"unitPrice"`
	Tiers        []tierRequest     `json:"tiers"`
	PackageSize  json.RawMessage   `json:"packageSize"`
	PackagePrice json.RawMessage   `json:"packagePrice"`
	EffectiveAt  string            `json:"effectiveAt"`
	Dimensions   map[string]string `json:"dimensions"`
}

type tierRequest struct {
	UpTo      json.RawMessage `json:"upTo"`
	UnitPrice json.RawMessage `json:"unitPrice"`
	FlatFee   json.RawMessage `json:"flatFee"`
}

// decimalField is a decimal string of the request: its name, the problem
// code of a value that is no string, and where its text goes.
type decimalField struct {
	name, code string
	raw        json.RawMessage
	to         *string
}

// request reads the decimal strings of r; a number where a decimal string
// is expected is refused with the field's code.
func (r activatePriceRequest) request() (domain.Request, *httpx.Problem) {
	out := domain.Request{MeterCode: r.MeterCode, Currency: r.Currency, Model: r.Model, EffectiveAt: r.EffectiveAt,
		Dimensions: r.Dimensions}
	fields := []decimalField{
		{"unitPrice", domain.CodeInvalidPrice, r.UnitPrice, &out.UnitPrice},
		{"packageSize", pricing.CodeInvalidPackage, r.PackageSize, &out.PackageSize},
		{"packagePrice", domain.CodeInvalidPrice, r.PackagePrice, &out.PackagePrice},
	}
	out.Tiers = make([]domain.TierRequest, len(r.Tiers))
	for i, t := range r.Tiers {
		fields = append(fields,
			decimalField{fmt.Sprintf("tiers[%d].upTo", i), pricing.CodeInvalidTierBound, t.UpTo, &out.Tiers[i].UpTo},
			decimalField{fmt.Sprintf("tiers[%d].unitPrice", i), domain.CodeInvalidPrice, t.UnitPrice, &out.Tiers[i].UnitPrice},
			decimalField{fmt.Sprintf("tiers[%d].flatFee", i), domain.CodeInvalidPrice, t.FlatFee, &out.Tiers[i].FlatFee})
	}
	for _, f := range fields {
		s, p := httpx.DecimalText(f.name, f.code, f.raw)
		if p != nil {
			return domain.Request{}, p
		}
		*f.to = s
	}
	return out, nil
}

func (api *API) activatePrice(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var req activatePriceRequest
	cmd, p := httpx.ReadCommand(w, r, &req)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	dreq, p := req.request()
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	act, err := domain.ParseActivation(dreq)
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	rc, err := api.idempotent(r.Context(), pricesScope(tenant), cmd, func(tx pgx.Tx) (int, any, error) {
		price, err := api.app.ActivatePrice(r.Context(), tx, app.ActivatePrice{
			Actor: actor, TenantID: tenant, Activation: act, CorrelationID: cmd.CorrelationID,
		})
		return http.StatusCreated, price, err
	})
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	httpx.WriteReply(w, rc)
}

// priceCursor is the keyset position a page of prices ends at.
type priceCursor struct {
	MeterCode string `json:"m"`
	Currency  string `json:"c"`
	Version   int64  `json:"v"`
}

type listPricesResponse struct {
	Prices []app.Price `json:"prices"`
	Next   *string     `json:"next,omitempty"`
}

// listPrices: GET /v1/tenants/{tenantId}/prices?meterCode=&limit=&cursor=
// -> {prices, next}, in (meterCode, currency, version) order; next is absent
// on the last page.
func (api *API) listPrices(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	q := r.URL.Query()
	meterCode := q.Get("meterCode")
	if meterCode != "" {
		if err := domain.CheckMeterCode(meterCode); err != nil {
			httpx.WriteError(w, r, api.log, err)
			return
		}
	}
	req, p := page.Parse(q)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after priceCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if meterCode != "" && !req.First() && after.MeterCode != meterCode {
		// A cursor of another meter's list, or of the unfiltered one.
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_cursor",
			"cursor must be a next value this list returned"))
		return
	}
	prices, err := api.app.ListPrices(r.Context(), app.ListPrices{TenantID: tenant, MeterCode: meterCode,
		After: app.PriceKey(after), Limit: req.Fetch()})
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	prices, next := page.Cut(req, prices, func(p app.Price) any { return priceCursor(p.Key()) })
	if prices == nil {
		prices = []app.Price{}
	}
	httpx.WriteJSON(w, http.StatusOK, listPricesResponse{Prices: prices, Next: next})
}
