package auth_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/usagebilling/billing/pkg/auth"
)

const composeIssuer = "usagebilling-compose"

// keygen makes an issuer key and its JWKS document with the token command
// (`token keygen`, as `make compose-keys` does) and returns their paths.
func keygen(t *testing.T, kid string) (pemFile, jwksFile string) {
	t.Helper()
	dir := t.TempDir()
	pemFile, jwksFile = filepath.Join(dir, "issuer.pem"), filepath.Join(dir, "jwks.json")
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command runs the token command: %v", err)
	}
	cmd := exec.Command(goTool, "run", "../../cmd/token", "keygen", "-kid", kid, "-key", pemFile, "-jwks", jwksFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("token keygen: %v\n%s", err, out)
	}
	return pemFile, jwksFile
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestSignerFromEnv: a token of the environment's signer (the compose
// keys) verifies against the JWKS of `token keygen` as the services
// configure it (AUTH_JWKS, AUTH_ISSUER) and is refused by a service that
// holds only the development key; the development signer's token (nothing
// set) is the other way round.
func TestSignerFromEnv(t *testing.T) {
	pemFile, jwksFile := keygen(t, "issuer-1")
	compose, err := auth.SignerFrom(env(map[string]string{
		auth.EnvSigningKey: pemFile, auth.EnvSigningKeyID: "issuer-1", auth.EnvIssuer: composeIssuer}))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := auth.SignerFrom(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if compose.Dev() || !dev.Dev() {
		t.Fatalf("Dev(): compose %v, unset %v; want false, true", compose.Dev(), dev.Dev())
	}
	if strings.Contains(compose.String(), "PRIVATE") || !strings.Contains(compose.String(), "issuer-1") {
		t.Fatalf("String() = %q: want the kid, never the key", compose.String())
	}

	jwksService, err := auth.New(auth.Config{Service: "usage", Issuer: composeIssuer, JWKS: jwksFile})
	if err != nil {
		t.Fatal(err)
	}
	devService, err := auth.New(auth.Config{Service: "usage", Dev: true})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name              string
		signer            auth.Signer
		accepts, refuses  auth.Keys
		wantIss, wantKid  string
		refusedWithReason string
	}{
		{"compose key", compose, jwksService, devService, composeIssuer, "issuer-1", "unverifiable (unknown key id)"},
		{"development key", dev, devService, jwksService, auth.DevIssuer, auth.DevKey.ID, "unverifiable (unknown key id)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := tc.signer.Token("alice", auth.RoleTenant, "acme")
			if err != nil {
				t.Fatal(err)
			}
			parsed, _, err := jwt.NewParser().ParseUnverified(tok, &auth.Claims{})
			if err != nil {
				t.Fatal(err)
			}
			if kid := parsed.Header["kid"]; kid != tc.wantKid {
				t.Errorf("kid %v, want %q", kid, tc.wantKid)
			}
			c, err := tc.accepts.Verify(tok)
			if err != nil {
				t.Fatalf("refused by the service holding its key: %v", err)
			}
			if c.Issuer != tc.wantIss || c.Tenant != "acme" || !slices.Equal(c.Roles, auth.TenantRoles) {
				t.Errorf("claims: iss %q tenant %q roles %v; want %q, acme, %v", c.Issuer, c.Tenant, c.Roles, tc.wantIss, auth.TenantRoles)
			}
			for _, s := range auth.Services {
				if !slices.Contains(c.Audience, s) {
					t.Errorf("aud %v lacks %s", c.Audience, s)
				}
			}
			_, err = tc.refuses.Verify(tok)
			if !errors.Is(err, auth.ErrInvalidToken) || auth.Reason(err) != tc.refusedWithReason {
				t.Fatalf("the other service: err %v (reason %q); want refused: %s", err, auth.Reason(err), tc.refusedWithReason)
			}
		})
	}

	// The right key under another issuer than the services check: refused.
	other, err := auth.ReadSigner(pemFile, "issuer-1", "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := other.Token("alice", auth.RoleOperator, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jwksService.Verify(tok); auth.Reason(err) != "issuer not accepted" {
		t.Fatalf("another issuer: %v (reason %q); want issuer not accepted", err, auth.Reason(err))
	}
}

// TestSignerFromBadEnv: a signer the environment gets wrong is an error
// naming the variable, never a development key in its place.
func TestSignerFromBadEnv(t *testing.T) {
	pemFile, _ := keygen(t, "issuer-1")
	notKey := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"key without kid and issuer", map[string]string{auth.EnvSigningKey: pemFile}, "AUTH_SIGNING_KEY_ID and AUTH_ISSUER required"},
		{"key without issuer", map[string]string{auth.EnvSigningKey: pemFile, auth.EnvSigningKeyID: "issuer-1"}, "AUTH_ISSUER required"},
		{"kid without key", map[string]string{auth.EnvSigningKeyID: "issuer-1"}, "AUTH_SIGNING_KEY is not"},
		{"no such file", map[string]string{auth.EnvSigningKey: pemFile + ".gone", auth.EnvSigningKeyID: "issuer-1", auth.EnvIssuer: composeIssuer}, "no such file"},
		{"not a PEM key", map[string]string{auth.EnvSigningKey: notKey, auth.EnvSigningKeyID: "issuer-1", auth.EnvIssuer: composeIssuer}, "want a PEM PRIVATE KEY"},
		{"a service's kid", map[string]string{auth.EnvSigningKey: pemFile, auth.EnvSigningKeyID: "query/1", auth.EnvIssuer: composeIssuer}, "names a service's key"},
		{"the development kid", map[string]string{auth.EnvSigningKey: pemFile, auth.EnvSigningKeyID: "dev", auth.EnvIssuer: composeIssuer}, "published development key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := auth.SignerFrom(env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SignerFrom: %v (signer %v); want an error containing %q", err, s, tc.want)
			}
		})
	}

	if _, err := auth.DevSigner.Sign(auth.NewClaims("query", auth.RoleService, "", auth.MaxServiceTTL)); err == nil {
		t.Fatal("a client signer signed a service token")
	}
	if _, err := (auth.Signer{}).Token("alice", auth.RoleOperator, ""); err == nil {
		t.Fatal("the zero Signer signed")
	}
}
