package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// Targets returns the base URLs of a service's running instances; the
// client spreads its requests over them and fails over to the next one
// when an instance does not answer (it may have just been killed).
type Targets func(service string) []string

// Client talks to the services over HTTP as a tenant would. Its only
// credential handling is authorize: a tenant token signed by the
// environment's signer (auth.SignerFromEnv: the published development key
// the local stack accepts, unless AUTH_SIGNING_KEY names the issuer's key),
// remade every 20 minutes so a long run never sends an expired one.
type Client struct {
	targets Targets
	http    *http.Client
	next    atomic.Uint64

	mu     sync.Mutex
	tokens map[string]token
}

type token struct {
	header string
	made   time.Time
}

// NewClient returns a client for the instances targets lists.
func NewClient(targets Targets) *Client {
	return &Client{
		targets: targets,
		http: &http.Client{
			Timeout: 20 * time.Second,
			Transport: &http.Transport{
				MaxIdleConnsPerHost: 32,
				IdleConnTimeout:     30 * time.Second,
			},
		},
		tokens: map[string]token{},
	}
}

// authorize is the one place that decides the Authorization header of a
// tenant's requests.
func (c *Client) authorize(tenant string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tokens[tenant]
	if !ok || time.Since(t.made) > 20*time.Minute {
		// ingest, viewer and billing-admin: a run sends usage, reads, prices and closes.
		tok, err := auth.TokenFromEnv("dev-tenant", auth.RoleTenant, tenant)
		if err != nil {
			panic(fmt.Sprintf("chaos client: sign a token for %s: %v", tenant, err)) // the environment names a bad key
		}
		t = token{header: "Bearer " + tok, made: time.Now()}
		c.tokens[tenant] = t
	}
	return t.header
}

// Response is an HTTP answer: status, headers, body and, for a problem
// (application/problem+json), its code.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Code   string
	// Instance is the base URL that answered.
	Instance string
}

// Problem reports whether the answer is an RFC 9457 problem.
func (r *Response) Problem() bool {
	return strings.Contains(r.Header.Get("Content-Type"), "problem+json")
}

func (r *Response) String() string {
	body := strings.TrimSpace(string(r.Body))
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	return fmt.Sprintf("%d %s", r.Status, body)
}

// Decode decodes a JSON body into out.
func (r *Response) Decode(out any) error {
	if err := json.Unmarshal(r.Body, out); err != nil {
		return fmt.Errorf("decode %q: %w", truncate(string(r.Body), 200), err)
	}
	return nil
}

// Do sends one request for tenant to one instance of service, starting
// with the next in turn and trying the others when an instance cannot be
// reached. A transport error from every instance is an error; any HTTP
// status is an answer for the caller to judge.
func (c *Client) Do(ctx context.Context, service, method, path, tenant string, body any, headers map[string]string) (*Response, error) {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	urls := c.targets(service)
	if len(urls) == 0 {
		return nil, fmt.Errorf("%s: no running instance", service)
	}
	start := int(c.next.Add(1))
	var lastErr error
	for i := range urls {
		base := urls[(start+i)%len(urls)]
		resp, err := c.once(ctx, base, method, path, tenant, raw, headers)
		if err == nil {
			return resp, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (c *Client) once(ctx context.Context, base, method, path, tenant string, raw []byte, headers map[string]string) (*Response, error) {
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tenant != "" {
		req.Header.Set("Authorization", c.authorize(tenant))
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s%s: %w", method, base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s%s: read the answer: %w", method, base, path, err)
	}
	out := &Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Instance: base}
	if out.Problem() {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(b, &p)
		out.Code = p.Code
	}
	return out, nil
}

// Get fetches path for tenant and decodes a 200 answer into out.
func (c *Client) Get(ctx context.Context, service, path, tenant string, out any) error {
	resp, err := c.Do(ctx, service, http.MethodGet, path, tenant, nil, nil)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("GET %s %s: %s", service, path, resp)
	}
	return resp.Decode(out)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
