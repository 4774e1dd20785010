// Package auth is the access control every service shares: bearer JSON Web
// Tokens signed with Ed25519 (EdDSA), whose claims name the caller (sub),
// its roles, the tenant of a tenant-scoped token, the issuer (iss), the
// services it is for (aud) and a bounded lifetime (iat, exp).
//
// Users' tokens (ingest, viewer, billing-admin, operator) come from one
// issuer; a service signs its own calls to another (role service) with its
// own key, as issuer of its own name. Public keys come by key id (kid) from a
// JWKS document (a file or a URL), reloaded so keys rotate without a restart
// (see Config and Keys).
//
// DevKey is a published development key for a laptop, the tests and the
// demo only: a service accepts it only when told to (AUTH_DEV_KEY=true), only
// on a loopback listener, and says so in its log and its metrics.
//
// Middleware verifies the bearer of every request; each route declares the
// roles it admits (Allow), and Check refuses a route that declares none.
package auth

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Services are the services tokens may be for (their aud).
var Services = []string{"meter", "usage", "billing", "invoice", "query"}

// Lifetimes: the longest a token may live (exp - iat), refused beyond.
const (
	MaxUserTTL    = time.Hour
	MaxServiceTTL = 5 * time.Minute
)

// Roles. A token carries one or more (its "roles" claim); each route
// declares the roles it admits (see Allow).
const (
	// RoleIngest sends a tenant's usage and reads it back.
	RoleIngest = "ingest"
	// RoleViewer reads a tenant's prices, charges, invoices, summary and
	// period estimate.
	RoleViewer = "viewer"
	// RoleBillingAdmin changes a tenant's billing: prices, adjustments,
	// period closes, settings and webhook endpoints (and reads them).
	RoleBillingAdmin = "billing-admin"
	// RoleOperator calls the operator API and uses the console; it reaches
	// no tenant's endpoints.
	RoleOperator = "operator"
	// RoleService is another service calling an internal endpoint.
	RoleService = "service"
	// RoleCatalogAdmin defines meters and publishes plans: the catalog of
	// the installation, no tenant.
	RoleCatalogAdmin = "catalog-admin"
	// RolePlatformIngest sends usage for any tenant (a company's gateway)
	// and reads nothing.
	RolePlatformIngest = "platform-ingest"

	// RoleTenant is not a role a token carries: NewClaims expands it to
	// TenantRoles, the shorthand of the development tokens of tests and the
	// local stack (auth.DevToken(auth.RoleTenant, "acme")).
	RoleTenant = "tenant"
)

// TenantRoles are the roles scoped to one tenant (the token's tenant claim,
// which must be the route's {tenantId}).
var TenantRoles = []string{RoleIngest, RoleViewer, RoleBillingAdmin}

// Roles are every role a token may carry.
var Roles = []string{RoleIngest, RoleViewer, RoleBillingAdmin, RoleOperator, RoleService, RoleCatalogAdmin, RolePlatformIngest}

// TenantScoped reports whether role reaches one tenant only.
func TenantScoped(role string) bool { return slices.Contains(TenantRoles, role) }

// Claims are what a token says about its bearer.
type Claims struct {
	// Roles are what the bearer may do: one of Roles each.
	Roles []string `json:"roles"`
	// Tenant is the tenant of a token with tenant-scoped roles; empty
	// otherwise.
	Tenant string `json:"tenant,omitempty"`
	jwt.RegisteredClaims
}

// Actor is who the bearer is (the subject), for audits.
func (c Claims) Actor() string { return c.Subject }

// Has reports whether the token carries role.
func (c Claims) Has(role string) bool { return slices.Contains(c.Roles, role) }

// NewClaims returns claims for subject with role (and tenant, for a
// tenant-scoped role) that expire after ttl. Role RoleTenant stands for
// TenantRoles.
func NewClaims(subject, role, tenant string, ttl time.Duration) Claims {
	roles := []string{role}
	if role == RoleTenant {
		roles = slices.Clone(TenantRoles)
	}
	return NewClaimsRoles(subject, tenant, ttl, roles...)
}

// NewClaimsRoles returns claims for subject with roles (and tenant, for
// tenant-scoped roles) that expire after ttl.
func NewClaimsRoles(subject, tenant string, ttl time.Duration, roles ...string) Claims {
	now := time.Now()
	return Claims{
		Roles:  roles,
		Tenant: tenant,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   subject,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
	}
}

var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// check applies the claim rules beyond the signature and the expiry: known
// roles; tenant-scoped roles with a valid tenant and no other kind;
// operator and service alone, without a tenant.
func (c Claims) check() error {
	if strings.TrimSpace(c.Subject) == "" {
		return errors.New("token has no subject")
	}
	if len(c.Roles) == 0 {
		return errors.New("token has no role")
	}
	scoped := 0
	for _, r := range c.Roles {
		if !slices.Contains(Roles, r) {
			return fmt.Errorf("unknown role %q", r)
		}
		if TenantScoped(r) {
			scoped++
		}
	}
	switch {
	case scoped == len(c.Roles):
		if !tenantPattern.MatchString(c.Tenant) {
			return errors.New("a tenant-scoped token needs a valid tenant claim")
		}
	case len(c.Roles) > 1:
		return errors.New("operator and service tokens carry one role")
	case c.Tenant != "":
		return fmt.Errorf("a %s token names no tenant", c.Roles[0])
	}
	return nil
}

// ErrInvalidToken wraps every reason a token is refused.
var ErrInvalidToken = errors.New("invalid token")

// Reason is a refused token's reason fit for a client: what was wrong,
// never a key or the token itself.
func Reason(err error) string {
	switch {
	case errors.Is(err, errClaimsJSON):
		return "claims not strict JSON (a claim named twice or in other letter case, or exp, iat or nbf not a number)"
	case errors.Is(err, errDevKey):
		return "development key refused on this listener"
	case errors.Is(err, errIssuer):
		return "issuer not accepted"
	case errors.Is(err, errAudience):
		return "not for this service (aud)"
	case errors.Is(err, errLifetime):
		return "lifetime too long or no iat"
	case errors.Is(err, errCaller):
		return "this service does not accept calls from that service"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "not valid yet"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "bad signature or algorithm not accepted"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "a required claim is missing"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unverifiable (unknown key id)"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, errClaims):
		return "claims not accepted"
	default:
		return "not accepted"
	}
}

var errClaims = errors.New("claims")
