package auth

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Key is one Ed25519 signing key and its key id (the token's "kid").
type Key struct {
	ID      string
	Private ed25519.PrivateKey
}

// Public is the key's public half.
func (k Key) Public() ed25519.PublicKey { return k.Private.Public().(ed25519.PublicKey) }

// DevIssuer is the issuer of the development tokens.
const DevIssuer = "usagebilling-dev"

func devKey(id, seed string) Key {
	s := sha256.Sum256([]byte(seed))
	return Key{ID: id, Private: ed25519.NewKeyFromSeed(s[:])}
}

// DevKey is the published development key of the users' issuer (kid "dev"):
// anyone can sign with it. A service accepts it only with AUTH_DEV_KEY=true,
// on a loopback listener.
var DevKey = devKey("dev", "usagebilling-development-key-never-use-in-production")

// DevServiceKey is the published development key of service's own calls
// (kid "<service>/dev").
func DevServiceKey(service string) Key {
	return devKey(service+"/dev", "usagebilling-development-service-key/"+service)
}

// IsDevKeyID reports whether kid names a published development key.
func IsDevKeyID(kid string) bool { return kid == DevKey.ID || strings.HasSuffix(kid, "/dev") }

// Token signs claims with key (EdDSA, the key's id as kid). A token signed
// with a development key gets, when the claims leave them empty, the
// development issuer (or, for a service token, its subject) and every
// service as audience.
func Token(key Key, c Claims) (string, error) {
	if err := c.check(); err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	if len(key.Private) != ed25519.PrivateKeySize || key.ID == "" {
		return "", errors.New("sign token: not an Ed25519 key with an id")
	}
	if IsDevKeyID(key.ID) {
		if c.Issuer == "" {
			c.Issuer = DevIssuer
			if c.Has(RoleService) {
				c.Issuer = c.Subject
			}
		}
		if len(c.Audience) == 0 {
			c.Audience = jwt.ClaimStrings(Services)
		}
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	t.Header["kid"] = key.ID
	s, err := t.SignedString(key.Private)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// DevToken returns a token signed with a development key, for every
// service: role with subject "dev-<role>" (and tenant, for a tenant-scoped
// role; RoleTenant stands for the three), valid for an hour. A service token
// is query's (the one service that calls others), signed with its
// development key, valid for five minutes. For tests, the demo and the
// local stack.
func DevToken(role, tenant string) string {
	key, sub, ttl := DevKey, "dev-"+role, MaxUserTTL
	if role == RoleService {
		key, sub, ttl = DevServiceKey("query"), "query", MaxServiceTTL
	}
	s, err := Token(key, NewClaims(sub, role, tenant, ttl))
	if err != nil {
		panic(err) // only a bad role or tenant, a programming error
	}
	return s
}

// Config is how a service verifies tokens and signs its own calls.
type Config struct {
	// Service is this service's name: the audience its tokens must name,
	// and the issuer of its own service tokens.
	Service string
	// Issuer is the users' issuer (iss of every token but service tokens).
	Issuer string
	// JWKS is the public keys' document: a file path or an http(s) URL.
	JWKS string
	// Refresh is how often JWKS is read again (default 30s); an unknown kid
	// reads it again at once (at most once a second).
	Refresh time.Duration
	// Callers are the services whose service tokens this one accepts.
	Callers []string
	// ServiceKey signs this service's calls to others (kid "<Service>/...");
	// none when it calls nobody.
	ServiceKey *Key
	// Dev accepts the published development keys (the users' DevKey and
	// every service's DevServiceKey) and issuer DevIssuer; a request gets
	// through with one only on a loopback listener.
	Dev bool
}

// Keys verifies tokens and signs the service's own calls. The zero value
// refuses every token.
type Keys struct{ v *verifier }

type verifier struct {
	cfg      Config
	anyAud   bool // NewKeys: any service is a fit audience
	fixed    map[string]ed25519.PublicKey
	jwks     atomic.Pointer[map[string]ed25519.PublicKey]
	loadedAt atomic.Int64 // unix nanos
	loading  sync.Mutex
	signer   *Key
	log      *slog.Logger
	verified verified // tokens accepted before

	devInUse prometheus.Gauge
	reloads  *prometheus.CounterVec
	devCalls prometheus.Counter
}

// New returns the keys of cfg, reading its JWKS document once (an error when
// it cannot be read or holds no usable key).
func New(cfg Config) (Keys, error) {
	if cfg.Service == "" {
		return Keys{}, errors.New("auth: no service name")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 30 * time.Second
	}
	v := newVerifier(cfg)
	if cfg.Dev {
		v.fixed[DevKey.ID] = DevKey.Public()
		for _, s := range Services {
			k := DevServiceKey(s)
			v.fixed[k.ID] = k.Public()
		}
		if cfg.Issuer == "" {
			v.cfg.Issuer = DevIssuer
		}
		if cfg.ServiceKey == nil {
			k := DevServiceKey(cfg.Service)
			v.signer = &k
		}
	}
	if cfg.JWKS == "" && !cfg.Dev {
		return Keys{}, errors.New("auth: no JWKS document (AUTH_JWKS)")
	}
	if v.cfg.Issuer == "" {
		return Keys{}, errors.New("auth: no issuer (AUTH_ISSUER)")
	}
	if cfg.ServiceKey != nil && !strings.HasPrefix(cfg.ServiceKey.ID, cfg.Service+"/") {
		return Keys{}, fmt.Errorf("auth: the service key's id %q does not start with %q", cfg.ServiceKey.ID, cfg.Service+"/")
	}
	if cfg.JWKS != "" {
		if err := v.reload(); err != nil {
			return Keys{}, err
		}
	}
	return Keys{v: v}, nil
}

// NewKeys returns keys for tests: tokens signed by keys (as the users'
// issuer DevIssuer) and by every service's development key, for any
// audience, are accepted; service calls are signed with the development key
// of the caller named.
func NewKeys(keys ...Key) (Keys, error) {
	if len(keys) == 0 {
		return Keys{}, errors.New("no key")
	}
	v := newVerifier(Config{Service: "any", Issuer: DevIssuer, Callers: Services})
	v.anyAud = true
	for _, k := range keys {
		if k.ID == "" || strings.Contains(k.ID, "/") || len(k.Private) != ed25519.PrivateKeySize {
			return Keys{}, fmt.Errorf("key %q: want an Ed25519 key whose id has no /", k.ID)
		}
		if _, dup := v.fixed[k.ID]; dup {
			return Keys{}, fmt.Errorf("key %q given twice", k.ID)
		}
		v.fixed[k.ID] = k.Public()
	}
	for _, s := range Services {
		k := DevServiceKey(s)
		v.fixed[k.ID] = k.Public()
	}
	return Keys{v: v}, nil
}

func newVerifier(cfg Config) *verifier {
	v := &verifier{cfg: cfg, fixed: map[string]ed25519.PublicKey{}, signer: cfg.ServiceKey, log: slog.New(slog.DiscardHandler),
		devInUse: prometheus.NewGauge(prometheus.GaugeOpts{Name: "auth_dev_key_in_use",
			Help: "1 when the published development key is accepted (AUTH_DEV_KEY=true): never in production."}),
		devCalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "auth_dev_key_requests_total",
			Help: "Requests admitted with a token signed by a published development key."}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "auth_jwks_reloads_total",
			Help: "Reads of the JWKS document, by result (ok, error)."}, []string{"result"}),
	}
	if cfg.Dev {
		v.devInUse.Set(1)
	}
	return v
}

// Start logs the keys in use (loudly for the development key) and registers
// their metrics with reg: auth_dev_key_in_use, auth_dev_key_requests_total,
// auth_jwks_reloads_total.
func (k Keys) Start(log *slog.Logger, reg prometheus.Registerer) error {
	if k.v == nil {
		return errors.New("auth: no keys")
	}
	if log != nil {
		k.v.log = log
	}
	if k.v.cfg.Dev {
		k.v.log.Warn("AUTH_DEV_KEY=true: THE PUBLISHED DEVELOPMENT KEY IS ACCEPTED. Anyone can sign tokens with it. " +
			"Only on a loopback listener, for a laptop or a test; never in production.")
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{k.v.devInUse, k.v.devCalls, k.v.reloads} {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("auth: register metrics: %w", err)
			}
		}
	}
	return nil
}

// DevKeyInUse reports whether the development keys are accepted.
func (k Keys) DevKeyInUse() bool { return k.v != nil && k.v.cfg.Dev }

func (v *verifier) reload() error {
	keys, err := LoadJWKS(v.cfg.JWKS)
	v.loadedAt.Store(time.Now().UnixNano())
	if err != nil {
		v.reloads.WithLabelValues("error").Inc()
		return err
	}
	v.reloads.WithLabelValues("ok").Inc()
	v.jwks.Store(&keys)
	return nil
}

// key returns the public key of kid: the fixed (development) keys, then the
// JWKS document, read again when it is older than Refresh (in the
// background) or does not know kid (at once, at most once a second).
func (v *verifier) key(kid string) (ed25519.PublicKey, bool) {
	if k, ok := v.fixed[kid]; ok {
		return k, true
	}
	if v.cfg.JWKS == "" {
		return nil, false
	}
	age := time.Since(time.Unix(0, v.loadedAt.Load()))
	lookup := func() (ed25519.PublicKey, bool) {
		if m := v.jwks.Load(); m != nil {
			k, ok := (*m)[kid]
			return k, ok
		}
		return nil, false
	}
	if k, ok := lookup(); ok {
		if age > v.cfg.Refresh && v.loading.TryLock() {
			go func() {
				defer v.loading.Unlock()
				if err := v.reload(); err != nil {
					v.log.Error("reload JWKS; keeping the keys read before", "err", err)
				}
			}()
		}
		return k, true
	}
	if age > time.Second {
		v.loading.Lock()
		if time.Since(time.Unix(0, v.loadedAt.Load())) > time.Second {
			if err := v.reload(); err != nil {
				v.log.Error("reload JWKS; keeping the keys read before", "err", err)
			}
		}
		v.loading.Unlock()
	}
	return lookup()
}

// Verify checks a token: EdDSA signature by the key its kid names; exp and
// iat required, its lifetime at most MaxUserTTL (MaxServiceTTL for a service
// token), 30 seconds of clock skew; this service in aud; the issuer (the
// users' issuer, or for a service token the calling service itself, signing
// with a key of its own name, among the allowed callers); the claims' rules.
func (k Keys) Verify(token string) (Claims, error) {
	c, _, err := k.verify(token)
	return c, err
}

var (
	errIssuer   = errors.New("issuer not accepted")
	errAudience = errors.New("audience not accepted")
	errLifetime = errors.New("lifetime too long")
	errCaller   = errors.New("service not allowed to call")
	errDevKey   = errors.New("development key refused on a non-loopback listener")
)

func (k Keys) verify(token string) (Claims, string, error) {
	if k.v == nil {
		return Claims{}, "", fmt.Errorf("%w: no keys", ErrInvalidToken)
	}
	v := k.v
	sum := sha256.Sum256([]byte(token))
	if c, kid, ok := v.verified.get(sum, time.Now(), v.key); ok {
		return c, kid, nil
	}
	if err := checkClaimsJSON(token); err != nil {
		return Claims{}, "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	var c Claims
	var kid string
	var pub ed25519.PublicKey
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ = t.Header["kid"].(string)
		var ok bool
		if pub, ok = v.key(kid); !ok {
			return nil, fmt.Errorf("unknown key id %q", kid)
		}
		return pub, nil
	}, jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), jwt.WithLeeway(30*time.Second))
	if err != nil {
		return Claims{}, kid, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	fail := func(reason error, format string, a ...any) (Claims, string, error) {
		return Claims{}, kid, fmt.Errorf("%w: %w: %s", ErrInvalidToken, reason, fmt.Sprintf(format, a...))
	}
	if err := c.check(); err != nil {
		return Claims{}, kid, fmt.Errorf("%w: %w: %w", ErrInvalidToken, errClaims, err)
	}
	if c.IssuedAt == nil {
		return fail(errLifetime, "no iat")
	}
	max := MaxUserTTL
	if c.Has(RoleService) {
		max = MaxServiceTTL
	}
	if life := c.ExpiresAt.Sub(c.IssuedAt.Time); life > max {
		return fail(errLifetime, "%v, at most %v", life, max)
	}
	if v.anyAud { // NewKeys, for tests: some audience
		if len(c.Audience) == 0 {
			return fail(errAudience, "none")
		}
	} else if !slices.Contains(c.Audience, v.cfg.Service) {
		return fail(errAudience, "%v is not for %s", c.Audience, v.cfg.Service)
	}
	if c.Has(RoleService) {
		// A service signs its own calls, as their issuer, with a key of its
		// own name: no other key can speak for it.
		if c.Issuer != c.Subject || !strings.HasPrefix(kid, c.Issuer+"/") {
			return fail(errIssuer, "service token of %q issued by %q with key %q", c.Subject, c.Issuer, kid)
		}
		if !slices.Contains(v.cfg.Callers, c.Subject) {
			return fail(errCaller, "%q", c.Subject)
		}
	} else if c.Issuer != v.cfg.Issuer || strings.Contains(kid, "/") {
		return fail(errIssuer, "%q with key %q", c.Issuer, kid)
	}
	v.verified.put(sum, c, kid, pub)
	return c, kid, nil
}

// ServiceToken returns a token for this service's call to service target:
// role service, subject and issuer this service, signed with its own key,
// valid for a minute.
func (k Keys) ServiceToken(self, target string) (string, error) {
	if k.v == nil {
		return "", errors.New("auth: no keys")
	}
	key := k.v.signer
	if key == nil && k.v.anyAud { // NewKeys (tests): the caller's development key
		dk := DevServiceKey(self)
		key = &dk
	}
	if key == nil {
		return "", fmt.Errorf("auth: %s has no key of its own for service calls (AUTH_SERVICE_KEY)", self)
	}
	c := NewClaims(self, RoleService, "", time.Minute)
	c.Issuer = self
	c.Audience = jwt.ClaimStrings{target}
	return Token(*key, c)
}

// GenerateKey returns a new Ed25519 key named id.
func GenerateKey(id string) (Key, error) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return Key{}, err
	}
	return Key{ID: id, Private: priv}, nil
}

// WriteJWKS writes the public halves of keys as a JWKS document at path,
// atomically (a reader sees the old document or the new one).
func WriteJWKS(path string, keys ...Key) error {
	doc := JWKS{Keys: []JWK{}}
	for _, k := range keys {
		doc.Keys = append(doc.Keys, PublicJWK(k))
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
