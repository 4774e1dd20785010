package httpapi

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/billing/internal/app"
)

// SubscriptionRoutes mounts the subscriptions' endpoints (section 3a).
func (a *API) SubscriptionRoutes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/subscriptions", auth.Allow(a.subscribe, auth.RoleBillingAdmin))
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/subscriptions/{subscriptionId}/end", auth.Allow(a.endSubscription, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/subscriptions", auth.Allow(a.listSubscriptions, auth.RoleViewer, auth.RoleBillingAdmin))
}

type subscribeBody struct {
	PlanCode string `json:"planCode"`
	StartsAt string `json:"startsAt"`
}

// subscribe: POST /v1/tenants/{tenantId}/subscriptions (Idempotency-Key)
// {planCode, startsAt} -> 201 Subscription; startsAt absent: as soon as it
// may (the answer says when).
func (a *API) subscribe(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var in subscribeBody
	cmd, p := httpx.ReadCommand(w, r, &in)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if in.PlanCode == "" {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "missing_field", `field "planCode" is required`))
		return
	}
	startsAt, err := optionalTime("startsAt", in.StartsAt)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	rc, err := a.idempotent(r.Context(), subscriptionsScope(tenant), cmd, func(tx pgx.Tx) (int, any, error) {
		s, err := a.svc.Subscribe(r.Context(), tx, app.Subscribe{TenantID: tenant, PlanCode: in.PlanCode, StartsAt: startsAt, Actor: actor})
		return http.StatusCreated, s, err
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteReply(w, rc)
}

type endBody struct {
	EndsAt string `json:"endsAt"`
}

// endSubscription: POST .../subscriptions/{subscriptionId}/end
// (Idempotency-Key) {endsAt} -> 200 Subscription.
func (a *API) endSubscription(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	id, ok := httpx.ParseUUID(chi.URLParam(r, "subscriptionId"))
	if !ok {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_subscription_id",
			"subscription id must be a UUID in its canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), not the nil UUID"))
		return
	}
	var in endBody
	cmd, p := httpx.ReadCommand(w, r, &in)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	endsAt, err := optionalTime("endsAt", in.EndsAt)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	actor, p := auth.ActorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	rc, err := a.idempotent(r.Context(), subscriptionsScope(tenant), cmd, func(tx pgx.Tx) (int, any, error) {
		s, err := a.svc.EndSubscription(r.Context(), tx, app.EndSubscription{TenantID: tenant, SubscriptionID: id, EndsAt: endsAt, Actor: actor})
		return http.StatusOK, s, err
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteReply(w, rc)
}

// listSubscriptions: GET .../subscriptions?limit=&cursor= ->
// {subscriptions, next} in start order.
func (a *API) listSubscriptions(w http.ResponseWriter, r *http.Request) {
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
	var after app.SubscriptionPosition
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	subs, err := a.svc.Subscriptions(r.Context(), tenant, after, req.Fetch())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	subs, next := page.Cut(req, subs, func(s app.Subscription) any {
		return app.SubscriptionPosition{StartsAt: s.StartsAt, SubscriptionID: s.SubscriptionID}
	})
	if subs == nil {
		subs = []app.Subscription{}
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Subscriptions []app.Subscription `json:"subscriptions"`
		Next          *string            `json:"next,omitempty"`
	}{Subscriptions: subs, Next: next})
}

// optionalTime reads an RFC 3339 time; "" is the zero time.
func optionalTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := rule.Time(field, s)
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}
