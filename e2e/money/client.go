package money

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// client talks to the five services over HTTP with tenant tokens signed by
// the local stack's development key.
type client struct {
	urls   map[string]string // service -> base URL
	http   *http.Client
	mu     sync.Mutex
	tokens map[string]string
}

func newClient(urls map[string]string) *client {
	return &client{urls: urls, http: &http.Client{Timeout: time.Minute}, tokens: map[string]string{}}
}

type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Code is the problem code of a problem+json answer ("" otherwise).
func (a answer) Code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(a.Body, &p)
	return p.Code
}

func (a answer) decode(out any) error {
	if err := json.Unmarshal(a.Body, out); err != nil {
		return fmt.Errorf("decode %q: %w", clip(string(a.Body)), err)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

// token is a tenant's token, or with tenant "" a catalog-admin's.
func (c *client) token(tenant string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens[tenant] == "" {
		role, subject := auth.RoleTenant, "dev-tenant"
		of := tenant
		switch tenant {
		case "":
			role, subject = auth.RoleCatalogAdmin, "money-catalog"
		case operatorToken:
			role, subject, of = auth.RoleOperator, "money-operator", ""
		}
		// the development key unless AUTH_SIGNING_KEY names the issuer's
		tok, err := auth.TokenFromEnv(subject, role, of)
		if err != nil {
			panic(fmt.Sprintf("money client: sign a %s token for %q: %v", role, tenant, err)) // the environment names a bad key
		}
		c.tokens[tenant] = "Bearer " + tok
	}
	return c.tokens[tenant]
}

// do sends a request to a tenant's path of service; transport failures are
// errors, statuses are the caller's to judge.
func (c *client) do(ctx context.Context, service, method, tenant, path string, body any, headers map[string]string) (answer, error) {
	return c.send(ctx, service, method, tenant, "/v1/tenants/"+tenant+path, body, headers)
}

// operator sends an operator's request to query's path (the webhook
// intents, which query reads from invoice).
func (c *client) operator(ctx context.Context, method, path string) (answer, error) {
	return c.send(ctx, "query", method, operatorToken, path, nil, nil)
}

// operatorToken is the tokens key of the operator's token.
const operatorToken = "\x00operator"

// catalog sends a catalog-admin's request to meter's path.
func (c *client) catalog(ctx context.Context, method, path string, body any, headers map[string]string) (answer, error) {
	return c.send(ctx, "meter", method, "", path, body, headers)
}

func (c *client) send(ctx context.Context, service, method, tenant, path string, body any, headers map[string]string) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		rd = bytes.NewReader(b)
	}
	url := c.urls[service] + path
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", c.token(tenant))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read: %w", method, url, err)
	}
	if resp.StatusCode >= 500 {
		return answer{}, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, clip(strings.TrimSpace(string(raw))))
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: raw}, nil
}
