package httpapi

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// CreditRoutes mounts a tenant's credit grants (DESIGN.md section 3a).
func (a *API) CreditRoutes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/credit-grants", auth.Allow(a.grantCredit, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/credit-grants", auth.Allow(a.creditGrants, auth.RoleViewer, auth.RoleBillingAdmin))
}

type grantBody struct {
	Currency    string `json:"currency"`
	Amount      string `json:"amount"`
	EffectiveAt string `json:"effectiveAt"`
	ExpiresAt   string `json:"expiresAt"`
	Priority    *int   `json:"priority"`
	Reason      string `json:"reason"`
}

// grantCredit: POST /v1/tenants/{tenantId}/credit-grants (Idempotency-Key)
// {currency, amount, effectiveAt, expiresAt, priority, reason} -> 201
// CreditGrant; effectiveAt absent: now; expiresAt absent: none; priority
// absent: 0 (drawn first).
func (a *API) grantCredit(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var in grantBody
	cmd, p := httpx.ReadCommand(w, r, &in)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	req := domain.GrantRequest{Currency: in.Currency, Amount: in.Amount, Reason: in.Reason, Priority: in.Priority}
	for _, f := range []struct {
		name, value string
		into        **time.Time
	}{{"effectiveAt", in.EffectiveAt, &req.EffectiveAt}, {"expiresAt", in.ExpiresAt, &req.ExpiresAt}} {
		if f.value == "" {
			continue
		}
		t, err := rule.Time(f.name, f.value)
		if err != nil {
			httpx.WriteError(w, r, a.log, err)
			return
		}
		*f.into = &t
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var reply idempotency.Reply
	err := a.svc.InTx(r.Context(), func(tx pgx.Tx) (err error) {
		reply, err = idempotency.Run(r.Context(), tx, "invoice.credit-grants/"+tenant, cmd.IdempotencyKey, cmd.RequestHash,
			func() (int, any, error) {
				// Checked after the key: the checks depend on now (a
				// default effectiveAt, an expiry after now), and a retry of
				// an answered request replays its answer whenever it comes.
				g, err := domain.ParseGrant(req, a.svc.Now())
				if err != nil {
					return 0, nil, err
				}
				created, err := a.svc.GrantCredit(r.Context(), tx, app.GrantCredit{TenantID: tenant, Actor: actor, Grant: g})
				return http.StatusCreated, created, err
			})
		return err
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteReply(w, reply)
}

// creditGrants: GET /v1/tenants/{tenantId}/credit-grants?limit=&cursor= ->
// {grants, next}: in creation order, each with its balance and status now.
func (a *API) creditGrants(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after app.GrantPosition
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	gs, err := a.svc.CreditGrants(r.Context(), tenant, after, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	gs, next := page.Cut(req, gs, func(g app.CreditGrant) any {
		return app.GrantPosition{CreatedAt: g.CreatedAt, GrantID: g.GrantID}
	})
	httpx.WriteJSON(w, http.StatusOK, struct {
		Grants []app.CreditGrant `json:"grants"`
		Next   *string           `json:"next,omitempty"`
	}{Grants: gs, Next: next})
}
