package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// PeriodRoutes mounts the period lifecycle's endpoints (decision 0014):
// PUT /v1/tenants/{tenantId}/settings.
func (a *API) PeriodRoutes(r chi.Router) {
	r.Method(http.MethodPut, "/v1/tenants/{tenantId}/settings", auth.Allow(a.putSettings, auth.RoleBillingAdmin))
}

// settingsBody is the request of PUT .../settings; an absent field takes its
// default (UTC, PT1H): the request replaces the settings.
type settingsBody struct {
	TimeZone    *string       `json:"timeZone"`
	GracePeriod *string       `json:"gracePeriod"`
	TaxRates    []taxRateBody `json:"taxRates"`
}

type taxRateBody struct {
	Code string `json:"code"`
	Name string `json:"name"`
	Rate string `json:"rate"`
}

// putSettings: PUT /v1/tenants/{tenantId}/settings (Idempotency-Key)
// {timeZone, gracePeriod, taxRates} -> 200 {timeZone, gracePeriod,
// taxRates, effectiveFrom}: the settings of the periods not yet begun, from
// effectiveFrom on. Problems: invalid_time_zone, invalid_grace_period,
// invalid_tax_rate (400), grace_period_out_of_range, tax_rate_out_of_range,
// duplicate_tax_code, too_many_tax_rates (422).
func (a *API) putSettings(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var in settingsBody
	cmd, p := httpx.ReadCommand(w, r, &in)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	req := domain.SettingsRequest{TimeZone: in.TimeZone, GracePeriod: in.GracePeriod}
	for _, t := range in.TaxRates {
		req.TaxRates = append(req.TaxRates, domain.TaxRateRequest{Code: t.Code, Name: t.Name, Rate: t.Rate})
	}
	st, err := domain.ParseSettings(req)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	reply, err := a.idempotent(r.Context(), settingsScope(tenant), cmd, func(tx pgx.Tx) (int, any, error) {
		set, err := a.svc.PutSettings(r.Context(), tx, request(tenant, cmd, actor), st)
		return http.StatusOK, set, err
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteReply(w, reply)
}
