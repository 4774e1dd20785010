// Package httpapi maps the meter's HTTP API onto its commands, and domain
// errors onto problem responses.
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

// maxBody bounds a price activation request.
const maxBody = 16 << 10

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
	r.Method(http.MethodGet, "/openapi.json", meterapi.Handler())
}

// activatePriceRequest is {meterCode, currency, unitPrice, effectiveAt} or,
// for the other models, {meterCode, currency, model, tiers: [{upTo,
// unitPrice, flatFee}], packageSize, packagePrice, effectiveAt}. Decimals
// are JSON strings.
type activatePriceRequest struct {
	MeterCode    string          `json:"meterCode"`
	Currency     string          `json:"currency"`
	Model        string          `json:"model"`
	UnitPrice    json.RawMessage `json:"unitPrice"`
	Tiers        []tierRequest   `json:"tiers"`
	PackageSize  json.RawMessage `json:"packageSize"`
	PackagePrice json.RawMessage `json:"packagePrice"`
	EffectiveAt  string          `json:"effectiveAt"`
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
	out := domain.Request{MeterCode: r.MeterCode, Currency: r.Currency, Model: r.Model, EffectiveAt: r.EffectiveAt}
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
		s, ok := jsonString(f.raw)
		if !ok {
			return domain.Request{}, httpx.Problemf(http.StatusBadRequest, f.code, `%s must be a decimal string such as "0.25"`, f.name)
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
	key := r.Header.Get("Idempotency-Key")
	switch {
	case key == "":
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "missing_idempotency_key", "send an Idempotency-Key header"))
		return
	case !idempotency.ValidKey(key):
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_idempotency_key", "Idempotency-Key must be 1-255 printable ASCII characters"))
		return
	}
	correlationID, p := correlationID(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	body, p := readBody(w, r, maxBody)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var req activatePriceRequest
	if p := httpx.DecodeJSON(w, r, &req, maxBody); p != nil {
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
		api.writeError(w, r, err)
		return
	}
	claims, ok := auth.FromContext(r.Context())
	if !ok || claims.Actor() == "" {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnauthorized, "unauthorized",
			"a money-changing command needs a bearer token naming its actor"))
		return
	}
	rc, err := api.app.ActivatePrice(r.Context(), app.ActivatePrice{
		Actor:          claims.Actor(),
		TenantID:       tenant,
		IdempotencyKey: key,
		RequestHash:    idempotency.RequestHash(r.Method, r.URL.Path, body),
		Activation:     act,
		CorrelationID:  correlationID,
	})
	if err != nil {
		api.writeError(w, r, err)
		return
	}
	if rc.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rc.Status)
	_, _ = w.Write(rc.Body)
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
			api.writeError(w, r, err)
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
		api.writeError(w, r, err)
		return
	}
	prices, next := page.Cut(req, prices, func(p app.Price) any { return priceCursor(p.Key()) })
	if prices == nil {
		prices = []app.Price{}
	}
	httpx.WriteJSON(w, http.StatusOK, listPricesResponse{Prices: prices, Next: next})
}

func (api *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var de *domain.Error
	switch {
	case errors.As(err, &de):
		status := http.StatusBadRequest
		if de.Kind == domain.Rejected {
			status = http.StatusUnprocessableEntity
		}
		httpx.WriteProblem(w, httpx.NewProblem(status, de.Code, de.Detail))
	case errors.Is(err, app.ErrKeyReused):
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used with a different request"))
	default:
		p := httpx.StoreError(err)
		api.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path,
			"status", p.Status, "err", err)
		httpx.WriteProblem(w, p)
	}
}

// readBody reads the whole body (at most max bytes) and puts it back for
// decoding; the raw bytes identify the request for idempotency.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *httpx.Problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, httpx.Problemf(http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds %d bytes", max)
		}
		return nil, httpx.NewProblem(http.StatusBadRequest, "malformed_json", "could not read the body")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// jsonString returns the text of a JSON string value; absent and null are
// "". ok is false for any other JSON value (a number where a decimal string
// is expected).
func jsonString(raw json.RawMessage) (s string, ok bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// correlationID reads the optional X-Correlation-Id header.
func correlationID(r *http.Request) (string, *httpx.Problem) {
	id := r.Header.Get("X-Correlation-Id")
	if len(id) > 128 {
		return "", httpx.NewProblem(http.StatusBadRequest, "invalid_field", "X-Correlation-Id must be at most 128 printable ASCII characters")
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] >= 0x7f {
			return "", httpx.NewProblem(http.StatusBadRequest, "invalid_field", "X-Correlation-Id must be printable ASCII without spaces")
		}
	}
	return id, nil
}
