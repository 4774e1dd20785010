package load

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// client calls the services with the right token for each tenant.
type client struct {
	http     *http.Client
	urls     map[string]string
	spread   map[string][]string // every instance, when a service has several
	next     atomic.Uint64       // the instance of the next spread request
	mu       sync.Mutex
	tokens   map[string]string    // by tenant
	minted   map[string]time.Time // by tenant
	runID    string
	token    string // for every tenant, when set
	operator string // for the operator API; "" when the run has none
}

func newClient(cfg *Config) (*client, error) {
	c := &client{
		http: &http.Client{
			Timeout: 60 * time.Second,
			Transport: &http.Transport{
				MaxIdleConns:        4 * (cfg.Concurrency + 4),
				MaxIdleConnsPerHost: cfg.Concurrency + 4,
				IdleConnTimeout:     90 * time.Second,
			},
		},
		urls:   cfg.URLs,
		spread: cfg.Instances,
		tokens: map[string]string{},
		minted: map[string]time.Time{},
		token:  cfg.Token,
	}
	if cfg.Token != "" {
		if TokenTenant(cfg.Token) == "" {
			c.operator = cfg.Token
		}
		return c, nil
	}
	// Services refuse a token living over auth.MaxUserTTL: tenant tokens are
	// minted again by tokenFor when half of it has passed; the operator
	// token (read by the close at the end of a run) is minted for the
	// longest a service accepts.
	// The environment's signer (auth.SignerFromEnv): the development key
	// unless AUTH_SIGNING_KEY names the issuer's key.
	op, err := auth.TokenFromEnv("load-"+cfg.RunID, auth.RoleOperator, "")
	if err != nil {
		return nil, fmt.Errorf("mint an operator token: %w", err)
	}
	c.operator = op
	c.runID = cfg.RunID
	for _, t := range cfg.TenantIDs {
		if _, err := c.mint(t); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// TokenTenant returns the tenant claim of a tenant token (read, not
// verified), or "" for any other token: with a tenant token the run can
// reach that one tenant only.
func TokenTenant(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Roles  []string `json:"roles"`
		Tenant string   `json:"tenant"`
	}
	if json.Unmarshal(raw, &c) != nil || !slices.ContainsFunc(c.Roles, auth.TenantScoped) {
		return ""
	}
	return c.Tenant
}

// answer is an HTTP response read whole.
type answer struct {
	status int
	body   []byte
	header http.Header
}

// problemCode returns the code of an application/problem+json body, or "".
func (a answer) problemCode() string {
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(a.body, &p) != nil {
		return ""
	}
	return p.Code
}

func (a answer) String() string {
	b := strings.TrimSpace(string(a.body))
	if len(b) > 300 {
		b = b[:300] + "..."
	}
	return fmt.Sprintf("%d %s", a.status, b)
}

// base is the base URL of service for the next request: its instances in
// turn when it has several.
func (c *client) base(service string) string {
	if all := c.spread[service]; len(all) > 1 {
		return all[c.next.Add(1)%uint64(len(all))]
	}
	return c.urls[service]
}

// instances returns the base URL of each of service's instances.
func (c *client) instances(service string) []string {
	if all := c.spread[service]; len(all) > 1 {
		return all
	}
	return []string{c.urls[service]}
}

// get reads url with no token (/metrics).
func (c *client) get(ctx context.Context, url string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answer{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, header: resp.Header}, err
}

// do sends a request to service for tenant ("" for none: /metrics).
func (c *client) do(ctx context.Context, method, service, tenant, path string, header map[string]string, body any) (answer, error) {
	return c.send(ctx, c.tokenFor(tenant), method, service, path, header, body)
}

// doAs sends a request without a body with token, bounded by ctx alone
// (not by the client's 60 s timeout: a reconciliation reads the whole
// period).
func (c *client) doAs(ctx context.Context, token, method, service, path string) (answer, error) {
	long := &http.Client{Transport: c.http.Transport}
	return c.sendWith(ctx, long, token, method, service, path, nil, nil)
}

func (c *client) send(ctx context.Context, token, method, service, path string, header map[string]string, body any) (answer, error) {
	return c.sendWith(ctx, c.http, token, method, service, path, header, body)
}

func (c *client) sendWith(ctx context.Context, hc *http.Client, token, method, service, path string, header map[string]string, body any) (answer, error) {
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		default:
			raw, err := json.Marshal(body)
			if err != nil {
				return answer{}, err
			}
			rd = bytes.NewReader(raw)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.base(service), "/")+path, rd)
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, body: raw, header: resp.Header}, nil
}

func (c *client) tokenFor(tenant string) string {
	if tenant == "" {
		return ""
	}
	if c.token != "" {
		return c.token
	}
	c.mu.Lock()
	tok, made := c.tokens[tenant], c.minted[tenant]
	c.mu.Unlock()
	if tok == "" || time.Since(made) > auth.MaxUserTTL/2 {
		tok, _ = c.mint(tenant) // the signer signed every tenant's first token in newClient
	}
	return tok
}

// mint makes tenant's token: the three tenant roles, as the run sends
// usage, reads, activates prices and closes.
func (c *client) mint(tenant string) (string, error) {
	tok, err := auth.TokenFromEnv("load-"+c.runID, auth.RoleTenant, tenant)
	if err != nil {
		return "", fmt.Errorf("mint a token for tenant %s: %w", tenant, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens[tenant], c.minted[tenant] = tok, time.Now()
	return tok, nil
}

// deref is the value of an optional field of an API type (zero when absent).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
