package auth

import (
	"crypto/x509"
	"net/http"
)

// NewJWKSClient is newJWKSClient, for a test's own CA.
func NewJWKSClient(roots *x509.CertPool) *http.Client { return newJWKSClient(roots) }

// SetJWKSClient makes the JWKS reads use c until restore is called; not
// safe while a read runs.
func SetJWKSClient(c *http.Client) (restore func()) {
	old := jwksClient
	jwksClient = c
	return func() { jwksClient = old }
}

// Verified is how many accepted tokens k remembers.
func Verified(k Keys) int { return k.v.verified.len() }
