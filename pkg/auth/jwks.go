package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// JWK is one public key of a JWKS document (RFC 7517, RFC 8037): an Ed25519
// key is kty "OKP", crv "Ed25519", x its 32 bytes in base64url.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	Kid string `json:"kid"`
	X   string `json:"x"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
	D   string `json:"d,omitempty"` // a private key: refused
}

// JWKS is a JWKS document.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK returns the public JWK of key.
func PublicJWK(key Key) JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", Kid: key.ID, X: base64.RawURLEncoding.EncodeToString(key.Public()), Use: "sig", Alg: "EdDSA"}
}

// maxJWKS bounds a JWKS document, in bytes.
const maxJWKS = 1 << 20

// LoadJWKS reads the Ed25519 public keys of a JWKS document, by kid, from a
// file path or an http(s) URL. It refuses a document with a private key, a
// repeated kid, a key that is not Ed25519 or not for signing, or no key.
func LoadJWKS(src string) (map[string]ed25519.PublicKey, error) {
	var raw []byte
	var err error
	if strings.HasPrefix(src, "https://") || strings.HasPrefix(src, "http://") {
		raw, err = fetch(src)
	} else {
		raw, err = os.ReadFile(src)
	}
	if err != nil {
		return nil, fmt.Errorf("read JWKS %s: %w", src, err)
	}
	keys, err := ParseJWKS(raw)
	if err != nil {
		return nil, fmt.Errorf("read JWKS %s: %w", src, err)
	}
	return keys, nil
}

// jwksTimeout bounds one read of a JWKS document over http(s), redirects
// included.
const jwksTimeout = 5 * time.Second

// maxJWKSRedirects bounds the redirects a JWKS read follows.
const maxJWKSRedirects = 3

// jwksClient reads a JWKS document over http(s). Not http.DefaultClient:
// the keys it returns decide whose tokens are accepted, and that client
// follows a redirect from https to plain http (the document then travels,
// and can be altered, in the clear) and sends the request through the
// environment's proxy (HTTPS_PROXY), a party the URL does not name. This one
// follows a redirect only to an https URL (at most maxJWKSRedirects), uses
// no proxy, and gives up after jwksTimeout.
var jwksClient = newJWKSClient(nil)

// newJWKSClient returns a client as jwksClient describes, trusting roots
// (nil: the system's roots).
func newJWKSClient(roots *x509.CertPool) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	if roots != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: t, Timeout: jwksTimeout, CheckRedirect: checkJWKSRedirect}
}

// checkJWKSRedirect refuses a redirect to anything but https, and stops
// after maxJWKSRedirects.
func checkJWKSRedirect(req *http.Request, via []*http.Request) error {
	if req.URL.Scheme != "https" {
		return fmt.Errorf("refused a redirect to %s://%s: a JWKS document is read over https only", req.URL.Scheme, req.URL.Host)
	}
	if len(via) >= maxJWKSRedirects {
		return fmt.Errorf("stopped after %d redirects", maxJWKSRedirects)
	}
	return nil
}

func fetch(url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), jwksTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := jwksClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxJWKS))
}

// ParseJWKS reads the Ed25519 public keys of a JWKS document, by kid.
func ParseJWKS(raw []byte) (map[string]ed25519.PublicKey, error) {
	var doc JWKS
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("not a JWKS document: %w", err)
	}
	out := map[string]ed25519.PublicKey{}
	for i, k := range doc.Keys {
		switch {
		case k.D != "":
			return nil, fmt.Errorf("key %d (%q) holds a private key: a JWKS document is public", i, k.Kid)
		case k.Kty != "OKP" || k.Crv != "Ed25519":
			return nil, fmt.Errorf("key %d (%q): want kty OKP, crv Ed25519", i, k.Kid)
		case k.Use != "" && k.Use != "sig", k.Alg != "" && k.Alg != "EdDSA":
			return nil, fmt.Errorf("key %d (%q): not an EdDSA signing key", i, k.Kid)
		case k.Kid == "":
			return nil, fmt.Errorf("key %d: no kid", i)
		case IsDevKeyID(k.Kid):
			return nil, fmt.Errorf("key %q: the kid of a published development key", k.Kid)
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("key %q: x is not a base64url Ed25519 public key", k.Kid)
		}
		if _, dup := out[k.Kid]; dup {
			return nil, fmt.Errorf("key %q given twice", k.Kid)
		}
		out[k.Kid] = ed25519.PublicKey(x)
	}
	if len(out) == 0 {
		return nil, errors.New("no key")
	}
	return out, nil
}

// ReadPrivateKey reads an Ed25519 private key in PEM (PKCS #8, "PRIVATE
// KEY", as `openssl genpkey -algorithm ed25519` writes it).
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	return ParsePrivateKey(raw)
}

// ParsePrivateKey reads an Ed25519 private key in PEM (PKCS #8).
func ParsePrivateKey(raw []byte) (ed25519.PrivateKey, error) {
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("private key: want a PEM PRIVATE KEY block (PKCS #8)")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("private key: not Ed25519")
	}
	return ek, nil
}

// MarshalPrivateKey writes key in PEM (PKCS #8).
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
