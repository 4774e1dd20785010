package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/recon"
)

// ErrUnknownService is returned for a service that has no configured URL.
var ErrUnknownService = errors.New("unknown service")

// Client calls the internal endpoints of the services, each at its base
// URL, with a short-lived service token signed by keys.
type Client struct {
	urls    map[string]string
	keys    auth.Keys
	subject string
	hc      *http.Client
}

// NewClient returns a Client calling the services at urls (name -> base
// URL) as subject (the calling service's name).
func NewClient(urls map[string]string, keys auth.Keys, subject string) *Client {
	return &Client{urls: urls, keys: keys, subject: subject, hc: &http.Client{Timeout: 10 * time.Second}}
}

// Services returns the names of the services the client knows, sorted.
func (c *Client) Services() []string {
	out := make([]string, 0, len(c.urls))
	for name := range c.urls {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Knows reports whether service has a URL.
func (c *Client) Knows(service string) bool {
	_, ok := c.urls[service]
	return ok
}

// Recovery reads service's recovery counts.
func (c *Client) Recovery(ctx context.Context, service string) (Recovery, error) {
	var out Recovery
	return out, c.get(ctx, service, "/internal/v1/recovery", nil, &out)
}

// Quarantine reads a page of service's quarantined messages; q holds the
// endpoint's query parameters.
func (c *Client) Quarantine(ctx context.Context, service string, q url.Values) (QuarantinePage, error) {
	var out QuarantinePage
	return out, c.get(ctx, service, "/internal/v1/quarantine", q, &out)
}

// DeadLetters reads a page of service's dead letters after cursor after.
func (c *Client) DeadLetters(ctx context.Context, service string, after int64, limit int) (DeadLetterPage, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out DeadLetterPage
	return out, c.get(ctx, service, "/internal/v1/dead-letters", q, &out)
}

// ReconciliationPage reads a page of a reconciliation set of service into
// items (a pointer to a slice of the set's row type).
func (c *Client) ReconciliationPage(ctx context.Context, service, set string, q recon.Query, items any) error {
	v := url.Values{"tenantId": {q.TenantID}, "period": {q.Period}, "limit": {strconv.Itoa(q.Limit)}}
	if q.After != (recon.Position{}) {
		v.Set("after", recon.EncodePosition(q.After))
	}
	var out struct {
		Items json.RawMessage `json:"items"`
	}
	if err := c.get(ctx, service, "/internal/v1/reconciliation/"+set, v, &out); err != nil {
		return err
	}
	if err := json.Unmarshal(out.Items, items); err != nil {
		return fmt.Errorf("call %s reconciliation set %s: decode rows: %w", service, set, err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, service, path string, q url.Values, out any) error {
	base, ok := c.urls[service]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownService, service)
	}
	token, err := c.keys.ServiceToken(c.subject, service)
	if err != nil {
		return err
	}
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("call %s: %w", service, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("call %s: %w", service, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("call %s: read response: %w", service, err)
	}
	if resp.StatusCode != http.StatusOK {
		var p httpx.Problem
		if json.Unmarshal(body, &p) == nil && p.Code != "" {
			return fmt.Errorf("call %s %s: %d %s: %s", service, path, resp.StatusCode, p.Code, p.Detail)
		}
		return fmt.Errorf("call %s %s: status %d", service, path, resp.StatusCode)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("call %s %s: decode response: %w", service, path, err)
	}
	return nil
}
