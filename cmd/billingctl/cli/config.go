package cli

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// Services in port order: the local stack (make up) serves meter on 8081,
// usage on 8082, ... query on 8085.
var services = auth.Services

const roleOperator = auth.RoleOperator

// config is what flags and the environment say; flags win.
type config struct {
	url      string            // one base URL for every service
	urls     map[string]string // per service
	token    string
	keyFile  string
	kid      string
	issuer   string
	subject  string
	dev      bool
	tenant   string
	output   string
	jsonOut  bool
	timeout  time.Duration
	tokenTTL time.Duration
}

// Environment variables (besides auth.EnvSigningKey, EnvSigningKeyID and
// EnvIssuer, the signer's names every client reads: AUTH_SIGNING_KEY,
// AUTH_SIGNING_KEY_ID, AUTH_ISSUER).
const (
	envURL     = "BILLINGCTL_URL"     // one base URL for every service
	envURLFmt  = "BILLINGCTL_%s_URL"  // BILLINGCTL_METER_URL, ...
	envToken   = "BILLINGCTL_TOKEN"   // a bearer token to send as is
	envDev     = "BILLINGCTL_DEV"     // true: sign with the development key
	envTenant  = "BILLINGCTL_TENANT"  // the tenant of tenant commands
	envSubject = "BILLINGCTL_SUBJECT" // the subject (actor) of a signed token
	envOutput  = "BILLINGCTL_OUTPUT"  // table or json
	envTimeout = "BILLINGCTL_TIMEOUT" // per request
	defaultTTL = 15 * time.Minute     // a signed token's lifetime
	devWarning = "billingctl: WARNING: signing with the published development key for %s, which is not loopback; only a local stack (AUTH_DEV_KEY=true, loopback) should accept it\n"
)

func configFromEnv(getenv func(string) string) *config {
	c := &config{
		url:      getenv(envURL),
		urls:     map[string]string{},
		token:    getenv(envToken),
		keyFile:  getenv(auth.EnvSigningKey),
		kid:      getenv(auth.EnvSigningKeyID),
		issuer:   getenv(auth.EnvIssuer),
		subject:  getenv(envSubject),
		tenant:   getenv(envTenant),
		output:   getenv(envOutput),
		timeout:  30 * time.Second,
		tokenTTL: defaultTTL,
	}
	c.dev, _ = strconv.ParseBool(getenv(envDev))
	if c.output == "" {
		c.output = "table"
	}
	if d, err := time.ParseDuration(getenv(envTimeout)); err == nil && d > 0 {
		c.timeout = d
	}
	for i, s := range services {
		c.urls[s] = getenv(fmt.Sprintf(envURLFmt, strings.ToUpper(s)))
		if c.urls[s] == "" {
			c.urls[s] = fmt.Sprintf("http://127.0.0.1:%d", 8081+i)
		}
	}
	if c.subject == "" {
		c.subject = "billingctl"
		if u, err := user.Current(); err == nil && u.Username != "" {
			c.subject = u.Username
		}
	}
	return c
}

// register declares the global flags on fs, their defaults what is set
// already (so the same flag given before and after the command both count).
func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", c.url, "one base URL for every service (a gateway); env "+envURL)
	for _, s := range services {
		fs.Func(s+"-url", fmt.Sprintf("the %s service's base URL (default %s); env %s", s, c.urls[s], fmt.Sprintf(envURLFmt, strings.ToUpper(s))),
			func(v string) error { c.urls[s] = v; return nil })
	}
	fs.StringVar(&c.token, "token", c.token, "a bearer token to send; env "+envToken)
	fs.StringVar(&c.keyFile, "key", c.keyFile, "sign a token with this Ed25519 private key (PEM, see make compose-keys); env AUTH_SIGNING_KEY")
	fs.StringVar(&c.kid, "kid", c.kid, "the signing key's id; env AUTH_SIGNING_KEY_ID")
	fs.StringVar(&c.issuer, "iss", c.issuer, "the issuer of a signed token; env AUTH_ISSUER")
	fs.StringVar(&c.subject, "sub", c.subject, "the subject (actor, audited) of a signed token; env "+envSubject)
	fs.BoolVar(&c.dev, "dev", c.dev, "sign with the published development key (a local stack only); env "+envDev)
	fs.StringVar(&c.tenant, "tenant", c.tenant, "the tenant of tenant commands; env "+envTenant)
	fs.StringVar(&c.output, "o", c.output, "output: table or json; env "+envOutput)
	fs.BoolVar(&c.jsonOut, "json", c.jsonOut, "output JSON (as -o json)")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "time limit of each request; env "+envTimeout)
}

// client checks the configuration and returns a client for a command
// needing role ("" for none).
func (c *config) client(role string, stdio IO) (*Client, error) {
	if c.jsonOut {
		c.output = "json"
	}
	if c.output != "table" && c.output != "json" {
		return nil, usagef("-o must be table or json, not %q", c.output)
	}
	base := map[string]string{}
	for _, s := range services {
		u := c.urls[s]
		if c.url != "" {
			u = c.url
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, usagef("the %s URL %q is not an http(s) URL", s, u)
		}
		base[s] = strings.TrimRight(u, "/")
	}
	cl := &Client{base: base, http: &http.Client{Timeout: c.timeout}, out: stdio.Out, err: stdio.Err,
		in: stdio.In, terminal: stdio.Terminal, json: c.output == "json", tenant: c.tenant, cfg: c, role: role}
	if role == "" {
		return cl, nil
	}
	if auth.TenantScoped(role) && c.tenant == "" {
		return nil, usagef("a tenant command needs -tenant (or %s)", envTenant)
	}
	tok, err := c.bearer(role, stdio)
	if err != nil {
		return nil, err
	}
	cl.token = tok
	return cl, nil
}

// bearer is the token to send: -token as given, else one signed for role
// with -key (or -dev).
func (c *config) bearer(role string, stdio IO) (string, error) {
	if c.token != "" {
		return c.token, nil
	}
	return c.sign(stdio, role)
}

// sign signs a token for role (a comma list of roles) with the configured
// key, through auth.Signer. Unlike the test clients (auth.SignerFromEnv),
// billingctl never falls back to the development key: it wants -dev.
func (c *config) sign(stdio IO, role string) (string, error) {
	roles := strings.Split(role, ",")
	tenant := ""
	for _, r := range roles {
		if auth.TenantScoped(r) {
			tenant = c.tenant
		}
	}
	if tenant == "" && auth.TenantScoped(roles[0]) {
		return "", usagef("a tenant token needs -tenant (or %s)", envTenant)
	}
	claims := auth.NewClaimsRoles(c.subject, tenant, c.tokenTTL, roles...)
	var signer auth.Signer
	switch {
	case c.dev:
		if u := c.remoteURL(); u != "" {
			fmt.Fprintf(stdio.Err, devWarning, u)
		}
		signer = auth.DevSigner
	case c.keyFile == "":
		return "", usagef("no credential: -token (or %s), -key with -kid and -iss (or AUTH_SIGNING_KEY, AUTH_SIGNING_KEY_ID, AUTH_ISSUER), or -dev for a local stack", envToken)
	default:
		if c.kid == "" || c.issuer == "" {
			return "", usagef("-key needs -kid and -iss (or AUTH_SIGNING_KEY_ID, AUTH_ISSUER)")
		}
		s, err := auth.ReadSigner(c.keyFile, c.kid, c.issuer)
		if err != nil {
			return "", usageError{err.Error()}
		}
		signer = s
	}
	tok, err := signer.Sign(claims) // as the signer's issuer, for every service
	if err != nil {
		return "", usageError{err.Error()}
	}
	return tok, nil
}

// remoteURL is the first base URL that is not a loopback address, "" when
// every one is. The development key is meant for a stack on this machine:
// billingctl says so only when it is about to send it elsewhere, where it
// is a mistake, and stays quiet against make up, where it is the point.
func (c *config) remoteURL() string {
	urls := []string{c.url}
	if c.url == "" {
		urls = urls[:0]
		for _, s := range services {
			urls = append(urls, c.urls[s])
		}
	}
	for _, u := range urls {
		if !loopback(u) {
			return u
		}
	}
	return ""
}

// loopback reports whether base URL u names localhost or a loopback address.
func loopback(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	host := p.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
