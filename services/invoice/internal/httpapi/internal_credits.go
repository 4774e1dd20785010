package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/auth"
)

// InternalCreditRoutes mounts the read of a tenant's credit grants for
// other services (query's operator console):
//
//	GET /internal/v1/tenants/{tenantId}/credit-grants?limit=&cursor= -> {grants, next}
//
// the same handler and answer as the tenant's own GET
// /v1/tenants/{tenantId}/credit-grants, to a service token only.
func (a *API) InternalCreditRoutes(r chi.Router) {
	r.Method(http.MethodGet, "/internal/v1/tenants/{tenantId}/credit-grants", auth.Allow(a.creditGrants, auth.RoleService))
}
