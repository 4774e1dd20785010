// Package authtest stands in for auth.Middleware in handler tests that
// mount a service's routes without keys.
package authtest

import (
	"net/http"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// NoToken is the header that makes SignedIn send a request without claims.
const NoToken = "X-No-Token"

// SignedIn puts in each request's context the claims of a verified token
// of subject with roles, for the tenant of the request's
// /v1/tenants/{tenant}/ path (if any), as auth.Middleware would; a request
// with header NoToken gets none.
func SignedIn(subject string, roles ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(NoToken) == "" {
				tenant, path := "", r.URL.RawPath // the path chi routes on
				if path == "" {
					path = r.URL.Path
				}
				if rest, ok := strings.CutPrefix(path, "/v1/tenants/"); ok {
					tenant, _, _ = strings.Cut(rest, "/")
				}
				c := auth.NewClaimsRoles(subject, tenant, time.Hour, roles...)
				r = r.WithContext(auth.WithClaims(r.Context(), c))
			}
			next.ServeHTTP(w, r)
		})
	}
}
