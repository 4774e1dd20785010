package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

const plansScope = "meter/_catalog/plans"

// publishPlanRequest is {code, name, currency, fixedFees: [{code, name,
// amount}], charges: [{meterCode, dimensions, model, unitPrice, tiers,
// packageSize, packagePrice}], minimumSpend, effectiveAt}. Decimals are
// JSON strings.
type publishPlanRequest struct {
	Code         string          `json:"code"`
	Name         string          `json:"name"`
	Currency     string          `json:"currency"`
	FixedFees    []feeRequest    `json:"fixedFees"`
	Charges      []chargeRequest `json:"charges"`
	MinimumSpend json.RawMessage `json:"minimumSpend"`
	EffectiveAt  string          `json:"effectiveAt"`
}

type feeRequest struct {
	Code   string          `json:"code"`
	Name   string          `json:"name"`
	Amount json.RawMessage `json:"amount"`
}

type chargeRequest struct {
	MeterCode    string            `json:"meterCode"`
	Dimensions   map[string]string `json:"dimensions"`
	Model        string            `json:"model"`
	UnitPrice    json.RawMessage   `json:"unitPrice"`
	Tiers        []tierRequest     `json:"tiers"`
	PackageSize  json.RawMessage   `json:"packageSize"`
	PackagePrice json.RawMessage   `json:"packagePrice"`
}

// request reads the decimal strings of r, as an activation's are read.
func (r publishPlanRequest) request() (domain.PlanRequest, *httpx.Problem) {
	out := domain.PlanRequest{Code: r.Code, Name: r.Name, Currency: r.Currency, EffectiveAt: r.EffectiveAt}
	s, p := httpx.DecimalText("minimumSpend", domain.CodeInvalidPlan, r.MinimumSpend)
	if p != nil {
		return domain.PlanRequest{}, p
	}
	out.MinimumSpend = s
	for i, f := range r.FixedFees {
		amount, p := httpx.DecimalText(fmt.Sprintf("fixedFees[%d].amount", i), domain.CodeInvalidPlan, f.Amount)
		if p != nil {
			return domain.PlanRequest{}, p
		}
		out.FixedFees = append(out.FixedFees, domain.FeeRequest{Code: f.Code, Name: f.Name, Amount: amount})
	}
	for _, c := range r.Charges {
		pr, p := activatePriceRequest{MeterCode: c.MeterCode, Model: c.Model, UnitPrice: c.UnitPrice, Tiers: c.Tiers,
			PackageSize: c.PackageSize, PackagePrice: c.PackagePrice}.request()
		if p != nil {
			return domain.PlanRequest{}, p
		}
		out.Charges = append(out.Charges, domain.ChargeRequest{MeterCode: c.MeterCode, Model: pr.Model,
			UnitPrice: pr.UnitPrice, PackageSize: pr.PackageSize, PackagePrice: pr.PackagePrice, Tiers: pr.Tiers,
			Dimensions: c.Dimensions})
	}
	return out, nil
}

// publishPlan: POST /v1/plans (Idempotency-Key) -> 201 Plan, the next
// version of its code.
func (api *API) publishPlan(w http.ResponseWriter, r *http.Request) {
	var req publishPlanRequest
	cmd, p := httpx.ReadCommand(w, r, &req)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	preq, p := req.request()
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	plan, err := domain.ParsePlan(preq)
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	rc, err := api.idempotent(r.Context(), plansScope, cmd, func(tx pgx.Tx) (int, any, error) {
		out, err := api.app.PublishPlan(r.Context(), tx, app.PublishPlan{Plan: plan, CorrelationID: cmd.CorrelationID, Actor: actor})
		return http.StatusCreated, out, err
	})
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	httpx.WriteReply(w, rc)
}

// planCursor is the code a page of plans ends at; versionCursor the version
// a page of a plan's versions ends at.
type planCursor struct {
	Code string `json:"c"`
}

type versionCursor struct {
	Version int64 `json:"v"`
}

// listPlans: GET /v1/plans?limit=&cursor= -> {plans, next}: the latest
// version of each plan, in code order.
func (api *API) listPlans(w http.ResponseWriter, r *http.Request) {
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after planCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	plans, err := api.app.ListPlans(r.Context(), after.Code, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	plans, next := page.Cut(req, plans, func(p app.Plan) any { return planCursor{Code: p.Code} })
	httpx.WriteJSON(w, http.StatusOK, struct {
		Plans []app.Plan `json:"plans"`
		Next  *string    `json:"next,omitempty"`
	}{Plans: nonEmpty(plans), Next: next})
}

// listPlanVersions: GET /v1/plans/{code}/versions?limit=&cursor= ->
// {versions, next} in version order; 404 plan_not_found.
func (api *API) listPlanVersions(w http.ResponseWriter, r *http.Request) {
	code := chi.URLParam(r, "code")
	if err := domain.CheckPlanCode(code); err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after versionCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	versions, err := api.app.ListPlanVersions(r.Context(), code, after.Version, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	versions, next := page.Cut(req, versions, func(p app.Plan) any { return versionCursor{Version: p.Version} })
	httpx.WriteJSON(w, http.StatusOK, struct {
		Versions []app.Plan `json:"versions"`
		Next     *string    `json:"next,omitempty"`
	}{Versions: nonEmpty(versions), Next: next})
}

func nonEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
