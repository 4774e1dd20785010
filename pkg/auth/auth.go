// Package auth is the access control every service shares: bearer JSON Web
// Tokens signed with HS256 by one of a set of keys named by key id (the
// token's "kid" header), whose claims name the caller (sub), its role
// (operator, tenant or service), the tenant of a tenant token, and an expiry.
//
// The keys come from configuration (see ParseKeys). DevKey is a published
// development key for a laptop and the demo only: a service accepts it only
// when told to (AUTH_DEV_KEY=true), never by default.
//
// Middleware applies one policy by path to a whole service (see Rule), so no
// route can be left unprotected by forgetting to wrap it.
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

	// RoleTenant is not a role a token carries: NewClaims expands it to
	// TenantRoles, the shorthand of the development tokens of tests and the
	// local stack (auth.DevToken(auth.RoleTenant, "acme")).
	RoleTenant = "tenant"
)

// TenantRoles are the roles scoped to one tenant (the token's tenant claim,
// which must be the route's {tenantId}).
var TenantRoles = []string{RoleIngest, RoleViewer, RoleBillingAdmin}

// Roles are every role a token may carry.
var Roles = []string{RoleIngest, RoleViewer, RoleBillingAdmin, RoleOperator, RoleService}

// TenantScoped reports whether role reaches one tenant only.
func TenantScoped(role string) bool { return slices.Contains(TenantRoles, role) }

// MinSecretLength is the shortest HS256 secret accepted, in bytes.
const MinSecretLength = 32

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

// Key is one HS256 signing key.
type Key struct {
	// ID is the key id, sent as the token's "kid" header.
	ID string
	// Secret is the shared secret, at least MinSecretLength bytes.
	Secret []byte
}

// DevKey is the published development key (key id "dev"). Anyone can sign
// with it: a service accepts it only with AUTH_DEV_KEY=true.
var DevKey = Key{ID: "dev", Secret: []byte("usagebilling-development-key-never-use-in-production")}

// Token signs claims with key.
func Token(key Key, c Claims) (string, error) {
	if err := c.check(); err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	t.Header["kid"] = key.ID
	s, err := t.SignedString(key.Secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// DevToken returns a token signed with DevKey, valid for an hour: role with
// subject "dev-<role>" (and tenant, for a tenant token). For tests, the demo
// and the local stack.
func DevToken(role, tenant string) string {
	s, err := Token(DevKey, NewClaims("dev-"+role, role, tenant, time.Hour))
	if err != nil {
		panic(err) // only a bad role or tenant, a programming error
	}
	return s
}

// Keys verifies tokens with a set of keys and signs with the first.
type Keys struct {
	byID map[string][]byte
	sign Key
}

// NewKeys returns the key set of keys; the first signs. It refuses an empty
// set, a repeated or empty id, and a short secret.
func NewKeys(keys ...Key) (Keys, error) {
	if len(keys) == 0 {
		return Keys{}, errors.New("no key")
	}
	k := Keys{byID: make(map[string][]byte, len(keys)), sign: keys[0]}
	for _, key := range keys {
		switch {
		case key.ID == "":
			return Keys{}, errors.New("empty key id")
		case len(key.Secret) < MinSecretLength:
			return Keys{}, fmt.Errorf("key %q: secret shorter than %d bytes", key.ID, MinSecretLength)
		}
		if _, dup := k.byID[key.ID]; dup {
			return Keys{}, fmt.Errorf("key %q given twice", key.ID)
		}
		k.byID[key.ID] = key.Secret
	}
	return k, nil
}

// ParseKeys reads keys written "kid=secret[,kid=secret...]" (the form of
// AUTH_JWT_KEYS); the first signs.
func ParseKeys(s string) ([]Key, error) {
	var keys []Key
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, secret, ok := strings.Cut(part, "=")
		if !ok {
			return nil, errors.New(`want kid=secret[,kid=secret...]`)
		}
		keys = append(keys, Key{ID: strings.TrimSpace(id), Secret: []byte(strings.TrimSpace(secret))})
	}
	if len(keys) == 0 {
		return nil, errors.New("no key")
	}
	return keys, nil
}

// Sign signs claims with the set's signing key (the first).
func (k Keys) Sign(c Claims) (string, error) { return Token(k.sign, c) }

// ErrInvalidToken wraps every reason a token is refused.
var ErrInvalidToken = errors.New("invalid token")

// Verify checks a token's signature (HS256 with the key its kid names), its
// expiry (required; 30 seconds of clock skew allowed) and its claims.
func (k Keys) Verify(token string) (Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		secret, ok := k.byID[kid]
		if !ok {
			return nil, fmt.Errorf("unknown key id %q", kid)
		}
		return secret, nil
	}, jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithExpirationRequired(),
		jwt.WithLeeway(30*time.Second), jwt.WithIssuedAt())
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if err := c.check(); err != nil {
		return Claims{}, fmt.Errorf("%w: %w: %w", ErrInvalidToken, errClaims, err)
	}
	return c, nil
}

// Reason is a refused token's reason fit for a client: what was wrong,
// never a key or the token itself.
func Reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "not valid yet"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "bad signature"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unverifiable (algorithm or key not accepted)"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, errClaims):
		return "claims not accepted"
	default:
		return "not accepted"
	}
}

var errClaims = errors.New("claims")
