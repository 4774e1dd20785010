package auth

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/golang-jwt/jwt/v5"
)

// The environment of a client's signer (SignerFrom): the users' issuer's
// Ed25519 private key (a PEM file, as `token keygen` or `make compose-keys`
// writes it), its key id in the services' JWKS document, and the issuer the
// services check (their own AUTH_ISSUER). The token command and billingctl
// read the same names.
const (
	EnvSigningKey   = "AUTH_SIGNING_KEY"
	EnvSigningKeyID = "AUTH_SIGNING_KEY_ID"
	EnvIssuer       = "AUTH_ISSUER"
)

// Signer signs users' tokens for a client of the services (the demo, the
// end-to-end, load, money and chaos clients, billingctl): with the users'
// issuer's key, its kid in the token's header, as that issuer, for every
// service unless the claims name their audience. It never signs a service
// token: a service signs its own calls (Keys.ServiceToken).
type Signer struct {
	key    Key
	issuer string
}

// DevSigner signs with the published development key (DevKey) as
// DevIssuer: only a local stack (AUTH_DEV_KEY=true, loopback listeners)
// accepts its tokens.
var DevSigner = Signer{key: DevKey, issuer: DevIssuer}

// NewSigner returns the signer of the users' issuer's key as issuer.
func NewSigner(key Key, issuer string) (Signer, error) {
	switch {
	case len(key.Private) != ed25519.PrivateKeySize:
		return Signer{}, errors.New("signer: not an Ed25519 private key")
	case key.ID == "":
		return Signer{}, errors.New("signer: the key has no id (kid)")
	case strings.Contains(key.ID, "/"):
		return Signer{}, fmt.Errorf("signer: key id %q names a service's key (<service>/<version>), not the users' issuer's", key.ID)
	case IsDevKeyID(key.ID):
		return Signer{}, fmt.Errorf("signer: key id %q is the published development key's", key.ID)
	case strings.TrimSpace(issuer) == "":
		return Signer{}, errors.New("signer: no issuer")
	}
	return Signer{key: key, issuer: issuer}, nil
}

// ReadSigner reads the users' issuer's private key from keyFile (PEM,
// PKCS #8) and returns its signer, with key id kid, as issuer.
func ReadSigner(keyFile, kid, issuer string) (Signer, error) {
	priv, err := ReadPrivateKey(keyFile)
	if err != nil {
		return Signer{}, fmt.Errorf("signer: %s: %w", keyFile, err)
	}
	return NewSigner(Key{ID: kid, Private: priv}, issuer)
}

// SignerFrom returns the signer getenv describes: the key of
// AUTH_SIGNING_KEY with AUTH_SIGNING_KEY_ID and AUTH_ISSUER (both required
// with it), or, when AUTH_SIGNING_KEY is unset, DevSigner (what the local
// stack accepts). An error names the variable that is wrong.
func SignerFrom(getenv func(string) string) (Signer, error) {
	file, kid, iss := getenv(EnvSigningKey), getenv(EnvSigningKeyID), getenv(EnvIssuer)
	if file == "" {
		if kid != "" {
			return Signer{}, fmt.Errorf("%s is set but %s is not: give the key too, or neither for the development key", EnvSigningKeyID, EnvSigningKey)
		}
		return DevSigner, nil
	}
	var missing []string
	if kid == "" {
		missing = append(missing, EnvSigningKeyID)
	}
	if iss == "" {
		missing = append(missing, EnvIssuer)
	}
	if len(missing) > 0 {
		return Signer{}, fmt.Errorf("%s is set: %s required too", EnvSigningKey, strings.Join(missing, " and "))
	}
	s, err := ReadSigner(file, kid, iss)
	if err != nil {
		return Signer{}, fmt.Errorf("%s: %w", EnvSigningKey, err)
	}
	return s, nil
}

var envSigner = sync.OnceValues(func() (Signer, error) { return SignerFrom(os.Getenv) })

// SignerFromEnv returns the signer of the process's environment
// (SignerFrom(os.Getenv)), read once: the one way every client of the
// services chooses its key.
func SignerFromEnv() (Signer, error) { return envSigner() }

// Dev reports whether s signs with the published development key.
func (s Signer) Dev() bool { return s.key.ID != "" && IsDevKeyID(s.key.ID) }

// Issuer is the issuer of s's tokens.
func (s Signer) Issuer() string { return s.issuer }

// KeyID is the kid of s's tokens.
func (s Signer) KeyID() string { return s.key.ID }

// String names the key and the issuer, for a client's log; never the key.
func (s Signer) String() string {
	if s.Dev() {
		return fmt.Sprintf("the published development key (kid %q, issuer %q)", s.key.ID, s.issuer)
	}
	return fmt.Sprintf("key %q of issuer %q", s.key.ID, s.issuer)
}

// Sign signs c as s's issuer (whatever c says), for every service when c
// names no audience.
func (s Signer) Sign(c Claims) (string, error) {
	if s.key.ID == "" {
		return "", errors.New("sign token: no signer (the zero Signer)")
	}
	if c.Has(RoleService) {
		return "", errors.New("sign token: a client signs users' tokens; a service signs its own calls")
	}
	c.Issuer = s.issuer
	if len(c.Audience) == 0 {
		c.Audience = jwt.ClaimStrings(Services)
	}
	return Token(s.key, c)
}

// Token returns a token for subject with role (RoleTenant: the three
// tenant roles) and, for a tenant-scoped role, tenant, valid for
// MaxUserTTL, the longest a service accepts.
func (s Signer) Token(subject, role, tenant string) (string, error) {
	return s.Sign(NewClaims(subject, role, tenant, MaxUserTTL))
}

// TokenFromEnv returns s.Token(subject, role, tenant) of the environment's
// signer (SignerFromEnv): what a client that has no signer of its own sends.
func TokenFromEnv(subject, role, tenant string) (string, error) {
	s, err := SignerFromEnv()
	if err != nil {
		return "", fmt.Errorf("sign a %s token: %w", role, err)
	}
	return s.Token(subject, role, tenant)
}
