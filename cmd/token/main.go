// Command token prints a bearer token for the services' APIs, signed with
// the issuer's Ed25519 key, or makes such a key:
//
//	token -key issuer.pem -kid issuer-1 -iss https://auth.example -role viewer -tenant acme -aud billing,query
//	token -dev -role operator -sub alice     # the published development key: a local stack only
//	token keygen -kid issuer-1 -key issuer.pem -jwks jwks.json
//
// The key, its id and the issuer may come from AUTH_SIGNING_KEY,
// AUTH_SIGNING_KEY_ID and AUTH_ISSUER. Without a key it refuses, unless -dev
// asks for the development key (auth.DevKey), which services accept only
// with AUTH_DEV_KEY=true on a loopback listener.
//
// keygen writes a new Ed25519 private key (PEM PKCS #8, mode 0600) and adds
// its public half to a JWKS document (made when absent): the step a
// deployment runs once per key (the issuer's, and each service's
// "<service>/<version>").
package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/usagebilling/billing/pkg/auth"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "keygen" {
		if err := keygen(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "token keygen:", err)
			os.Exit(2)
		}
		return
	}
	if err := token(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "token:", err)
		os.Exit(2)
	}
}

func token(args []string) error {
	fs := flag.NewFlagSet("token", flag.ExitOnError)
	role := fs.String("role", auth.RoleOperator, "ingest, viewer, billing-admin (a comma list of these), operator or service")
	tenant := fs.String("tenant", "", "the tenant of a tenant-scoped token")
	sub := fs.String("sub", "", "the subject (actor); default dev-<role>")
	aud := fs.String("aud", strings.Join(auth.Services, ","), "the services the token is for")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid (services refuse more than 1h, 5m for service tokens)")
	keyFile := fs.String("key", os.Getenv("AUTH_SIGNING_KEY"), "the issuer's Ed25519 private key (PEM); env AUTH_SIGNING_KEY")
	kid := fs.String("kid", os.Getenv("AUTH_SIGNING_KEY_ID"), "the key's id in the JWKS document; env AUTH_SIGNING_KEY_ID")
	iss := fs.String("iss", os.Getenv("AUTH_ISSUER"), "the issuer; env AUTH_ISSUER")
	dev := fs.Bool("dev", false, "sign with the published development key (a local stack on loopback only)")
	_ = fs.Parse(args)
	if *sub == "" {
		*sub = "dev-" + *role
	}
	roles := strings.Split(*role, ",")
	c := auth.NewClaimsRoles(*sub, *tenant, *ttl, roles...)
	if *role == auth.RoleTenant {
		c = auth.NewClaims(*sub, *role, *tenant, *ttl)
	}
	c.Audience = jwt.ClaimStrings(strings.Split(*aud, ","))
	var key auth.Key
	switch {
	case *dev:
		fmt.Fprintln(os.Stderr, "token: WARNING: signed with the published development key; only a stack with AUTH_DEV_KEY=true on loopback accepts it")
		key = auth.DevKey
		c.Issuer = auth.DevIssuer
	case *keyFile == "":
		return errors.New("no signing key: -key FILE (or AUTH_SIGNING_KEY), or -dev for the published development key of a local stack")
	default:
		priv, err := auth.ReadPrivateKey(*keyFile)
		if err != nil {
			return err
		}
		if *kid == "" || *iss == "" {
			return errors.New("-kid and -iss (or AUTH_SIGNING_KEY_ID, AUTH_ISSUER) are required with -key")
		}
		key = auth.Key{ID: *kid, Private: priv}
		c.Issuer = *iss
	}
	t, err := auth.Token(key, c)
	if err != nil {
		return err
	}
	fmt.Println(t)
	return nil
}

func keygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ExitOnError)
	kid := fs.String("kid", "", "the new key's id (an issuer key: no /; a service's: <service>/<version>)")
	keyFile := fs.String("key", "", "where to write the private key (PEM, 0600); must not exist")
	jwksFile := fs.String("jwks", "", "the JWKS document to add the public key to (made when absent)")
	_ = fs.Parse(args)
	if *kid == "" || *keyFile == "" || *jwksFile == "" {
		return errors.New("-kid, -key and -jwks are required")
	}
	var doc auth.JWKS
	if raw, err := os.ReadFile(*jwksFile); err == nil {
		if err := json.Unmarshal(raw, &doc); err != nil {
			return fmt.Errorf("%s: %w", *jwksFile, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, k := range doc.Keys {
		if k.Kid == *kid {
			return fmt.Errorf("%s already has key %q", *jwksFile, *kid)
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	pemKey, err := auth.MarshalPrivateKey(priv)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*keyFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(pemKey); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	doc.Keys = append(doc.Keys, auth.PublicJWK(auth.Key{ID: *kid, Private: priv}))
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	tmp := *jwksFile + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *jwksFile) // readers see the old or the new document, never half
}
