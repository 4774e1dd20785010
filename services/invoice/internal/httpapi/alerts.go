package httpapi

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// AlertRoutes mounts a tenant's usage and spend alerts (DESIGN.md sections
// 3a and 7).
func (a *API) AlertRoutes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/alerts", auth.Allow(a.createAlert, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/alerts", auth.Allow(a.alerts, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodDelete, "/v1/tenants/{tenantId}/alerts/{alertId}", auth.Allow(a.deleteAlert, auth.RoleBillingAdmin))
}

type alertBody struct {
	Kind      string `json:"kind"`
	MeterCode string `json:"meterCode"`
	Currency  string `json:"currency"`
	Threshold string `json:"threshold"`
}

// createAlert: POST /v1/tenants/{tenantId}/alerts (Idempotency-Key)
// {kind, meterCode, currency, threshold} -> 201 Alert.
func (a *API) createAlert(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var in alertBody
	cmd, p := httpx.ReadCommand(w, r, &in)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	al, err := domain.ParseAlert(domain.AlertRequest(in))
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var reply idempotency.Reply
	err = a.svc.InTx(r.Context(), func(tx pgx.Tx) (err error) {
		reply, err = idempotency.Run(r.Context(), tx, "invoice.alerts/"+tenant, cmd.IdempotencyKey, cmd.RequestHash,
			func() (int, any, error) {
				out, err := a.svc.CreateAlert(r.Context(), tx, app.CreateAlert{TenantID: tenant, Actor: actor, Alert: al})
				return http.StatusCreated, out, err
			})
		return err
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteReply(w, reply)
}

// alerts: GET /v1/tenants/{tenantId}/alerts?limit=&cursor= -> {alerts,
// next}: the live alerts in creation order.
func (a *API) alerts(w http.ResponseWriter, r *http.Request) {
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
	var after app.AlertPosition
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	as, err := a.svc.Alerts(r.Context(), tenant, after, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	as, next := page.Cut(req, as, func(al app.Alert) any {
		return app.AlertPosition{CreatedAt: al.CreatedAt, AlertID: al.AlertID}
	})
	httpx.WriteJSON(w, http.StatusOK, struct {
		Alerts []app.Alert `json:"alerts"`
		Next   *string     `json:"next,omitempty"`
	}{Alerts: as, Next: next})
}

// deleteAlert: DELETE /v1/tenants/{tenantId}/alerts/{alertId} -> 204; an
// id that is not a UUID is 400 invalid_alert_id, an unknown or deleted one
// 404 not_found.
func (a *API) deleteAlert(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	id, ok := httpx.ParseUUID(chi.URLParam(r, "alertId"))
	if !ok {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_alert_id",
			"alert id must be a UUID in its canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), not the nil UUID"))
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	err := a.svc.DeleteAlert(r.Context(), tenant, id, actor)
	switch {
	case errors.Is(err, app.ErrAlertNotFound):
		httpx.WriteProblem(w, httpx.Problemf(http.StatusNotFound, "not_found", "tenant %s has no alert %s", tenant, id))
	case err != nil:
		httpx.WriteError(w, r, a.log, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
