package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/auth"
)

// InternalSubscriptionRoutes mounts the read of a tenant's subscriptions
// for other services (query's operator console):
//
//	GET /internal/v1/tenants/{tenantId}/subscriptions?limit=&cursor= -> {subscriptions, next}
//
// the same handler and answer as the tenant's own GET
// /v1/tenants/{tenantId}/subscriptions, to a service token only.
func (a *API) InternalSubscriptionRoutes(r chi.Router) {
	r.Method(http.MethodGet, "/internal/v1/tenants/{tenantId}/subscriptions", auth.Allow(a.listSubscriptions, auth.RoleService))
}
