// Package httpapi is billing's HTTP API: it checks requests, calls the app
// commands and maps domain errors to problem responses.
package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/billing/internal/app"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// API serves billing's HTTP endpoints.
type API struct {
	svc *app.App
	log *slog.Logger
}

// New returns the API over svc.
func New(svc *app.App, log *slog.Logger) *API {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &API{svc: svc, log: log}
}

// Routes mounts the endpoints on r.
func (a *API) Routes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/adjustments", auth.Allow(a.postAdjustment, auth.RoleBillingAdmin))
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/periods/{period}/close", auth.Allow(a.closePeriod, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/charges", auth.Allow(a.listCharges, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/periods/{period}", auth.Allow(a.getPeriod, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/openapi.json", billingapi.Handler())
}

// getPeriod: GET /v1/tenants/{tenantId}/periods/{period} -> {period, status,
// closesAt, estimate: {currency: amount}}, the running cost of the period so
// far (app.Estimate). A malformed period is 400 invalid_period; a period
// with nothing in it is open with an empty estimate.
func (a *API) getPeriod(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	period, err := domain.ParsePeriod(chi.URLParam(r, "period"))
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	est, err := a.svc.PeriodEstimate(r.Context(), tenant, period)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, est)
}

// adjustmentBody is the request of POST .../adjustments. Amount is kept raw
// so a JSON number is refused as invalid_amount, like any other non-decimal
// text, rather than as a generic type error.
type adjustmentBody struct {
	CorrectionOf string          `json:"correctionOf"`
	Amount       json.RawMessage `json:"amount"`
	Currency     string          `json:"currency"`
	Reason       string          `json:"reason"`
}

func (a *API) postAdjustment(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var in adjustmentBody
	cmd, p := httpx.ReadCommand(w, r, &in)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	amount, p := httpx.DecimalText("amount", "invalid_amount", in.Amount)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	adj, err := domain.ParseAdjustment(domain.AdjustmentRequest{
		CorrectionOf: in.CorrectionOf, Amount: amount, Currency: in.Currency, Reason: in.Reason,
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	reply, err := a.idempotent(r.Context(), adjustmentsScope(tenant), cmd, func(tx pgx.Tx) (int, any, error) {
		posted, err := a.svc.PostAdjustment(r.Context(), tx, request(tenant, cmd, actor), adj)
		return http.StatusCreated, posted, err
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteReply(w, reply)
}

func (a *API) closePeriod(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	// The close takes no body; the request is its method and path.
	cmd, p := httpx.ReadCommand(w, r, nil)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	period, err := domain.ClosablePeriod(chi.URLParam(r, "period"), a.svcNow())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	// The close runs in steps, claiming the key and saving its answer in
	// its own transactions; one still waiting for usage answers closing
	// and saves nothing, so a retry with the key carries on.
	key := steps(closeScope(tenant), cmd, http.StatusAccepted)
	closed, err := a.svc.ClosePeriod(r.Context(), request(tenant, cmd, actor), period, key)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	reply, err := key.Result(closed)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteReply(w, reply)
}

// listCharges: GET /v1/tenants/{t}/charges?period=[&meterCode=[&priceVersion=]][&limit=&cursor=]:
// one page of a period's charges in line order (meter, currency, price
// version, charge id). With meterCode and priceVersion, the charges behind
// one invoice line.
func (a *API) listCharges(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	q := r.URL.Query()
	period, err := domain.ParsePeriod(q.Get("period"))
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	f := app.ChargeFilter{Period: period, MeterCode: q.Get("meterCode")}
	if f.MeterCode != "" && !catalog.ValidKey(f.MeterCode) {
		// A filter no meter could match is the client's mistake, as
		// meter's price list answers it, not an empty page.
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_meter_code",
			"meterCode must be 1-64 characters of A-Z a-z 0-9 _ . -"))
		return
	}
	if v := q.Get("priceVersion"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_price_version", "priceVersion must be a positive integer"))
			return
		}
		if f.MeterCode == "" {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_price_version", "priceVersion needs meterCode"))
			return
		}
		f.PriceVersion = n
	}
	req, p := page.Parse(q)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after app.ChargePosition
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if !req.First() && f.MeterCode != "" && after.MeterCode != f.MeterCode {
		// A cursor of another meter's list (or of the whole period's) would
		// silently start over: refuse it like any cursor not of this list.
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_cursor", "cursor must be a next value this list returned"))
		return
	}
	charges, err := a.svc.ListCharges(r.Context(), tenant, f, after, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	charges, next := page.Cut(req, charges, func(c app.Charge) any { return c.Position() })
	if charges == nil {
		charges = []app.Charge{}
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Charges []app.Charge `json:"charges"`
		Next    *string      `json:"next,omitempty"`
	}{charges, next})
}

func (a *API) svcNow() time.Time { return a.svc.Now() }

// request is the app's request of a command.
func request(tenant string, cmd httpx.Command, actor string) app.Request {
	return app.Request{TenantID: tenant, CorrelationID: cmd.CorrelationID, Actor: actor}
}
