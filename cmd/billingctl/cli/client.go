package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/usagebilling/billing/pkg/httpx"
)

// Client calls the services for one command and prints its results.
type Client struct {
	base     map[string]string // service -> base URL
	http     *http.Client
	token    string
	tenant   string
	role     string
	json     bool
	in       io.Reader
	out      io.Writer
	err      io.Writer
	terminal bool
	cfg      *config
}

// call is one request.
type call struct {
	service string
	method  string
	path    string
	query   url.Values
	body    any
	header  map[string]string
	// problem, when set, also receives a problem answer's document (its
	// extension members, such as the per-event errors of POST /v1/events).
	problem any
}

// response is a 2xx answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends the call; a problem answer comes back as *httpx.Problem, an
// answer off contract (a non-2xx without a problem, a transport error) as
// another error.
func (c *Client) do(ctx context.Context, k call) (*response, error) {
	u := c.base[k.service] + k.path
	if len(k.query) > 0 {
		u += "?" + k.query.Encode()
	}
	var body io.Reader
	if k.body != nil {
		raw, err := json.Marshal(k.body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u, body)
	if err != nil {
		return nil, err
	}
	if k.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for h, v := range k.header {
		req.Header.Set(h, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", k.method, u, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", k.method, u, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return &response{status: resp.StatusCode, header: resp.Header, body: raw}, nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var p httpx.Problem
	if ct == "application/problem+json" && json.Unmarshal(raw, &p) == nil && p.Code != "" {
		if p.Status == 0 {
			p.Status = resp.StatusCode
		}
		if k.problem != nil {
			_ = json.Unmarshal(raw, k.problem)
		}
		return nil, &p
	}
	return nil, fmt.Errorf("%s %s: %d %s without a problem document: %s", k.method, u, resp.StatusCode,
		http.StatusText(resp.StatusCode), strings.TrimSpace(string(raw[:min(len(raw), 300)])))
}

// decode does the call and decodes its answer into v (numbers kept exact as
// json.Number when v holds any).
func (c *Client) decode(ctx context.Context, k call, v any) (*response, error) {
	resp, err := c.do(ctx, k)
	if err != nil {
		return nil, err
	}
	if v != nil {
		d := json.NewDecoder(bytes.NewReader(resp.body))
		d.UseNumber()
		if err := d.Decode(v); err != nil {
			return nil, fmt.Errorf("%s %s: the answer is not the JSON expected: %w", k.method, k.path, err)
		}
	}
	return resp, nil
}

// tenantPath is /v1/tenants/{tenant} followed by the path elements, each
// escaped.
func (c *Client) tenantPath(elems ...string) string {
	p := "/v1/tenants/" + url.PathEscape(c.tenant)
	for _, e := range elems {
		p += "/" + url.PathEscape(e)
	}
	return p
}

// paging is how a list command follows pages: --limit items at most
// (default one page of 100), --all for every page, --cursor to start at.
type paging struct {
	limit  int
	all    bool
	cursor string
}

func (p *paging) register(fs interface {
	IntVar(*int, string, int, string)
	BoolVar(*bool, string, bool, string)
	StringVar(*string, string, string, string)
}) {
	fs.IntVar(&p.limit, "limit", 100, "show at most this many items, following pages as needed")
	fs.BoolVar(&p.all, "all", false, "follow every page")
	fs.StringVar(&p.cursor, "cursor", "", "start at this cursor (a next value printed before)")
}

// list fetches pages of a list whose items are under key, following next
// as paging says, and returns the items and the next cursor (empty when the
// list is done).
func (c *Client) list(ctx context.Context, k call, key string, p paging) ([]map[string]any, string, error) {
	return c.listPages(ctx, k, key, p, nil)
}

// listPages is list, giving onPage (when not nil) each page's answer
// as it comes: its members besides the items (a report's header).
func (c *Client) listPages(ctx context.Context, k call, key string, p paging, onPage func(map[string]json.RawMessage)) ([]map[string]any, string, error) {
	if p.limit < 1 && !p.all {
		return nil, "", usagef("-limit must be at least 1")
	}
	var items []map[string]any
	cursor := p.cursor
	for {
		q := url.Values{}
		for name, v := range k.query {
			q[name] = v
		}
		want := 1000
		if !p.all {
			want = min(1000, p.limit-len(items))
		}
		q.Set("limit", fmt.Sprint(want))
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		page := k
		page.query = q
		var got map[string]json.RawMessage
		if _, err := c.decode(ctx, page, &got); err != nil {
			return nil, "", err
		}
		if onPage != nil {
			onPage(got)
		}
		var these []map[string]any
		if raw, ok := got[key]; ok {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			if err := d.Decode(&these); err != nil {
				return nil, "", fmt.Errorf("GET %s: %q is not a list: %w", k.path, key, err)
			}
		}
		items = append(items, these...)
		cursor = ""
		if raw, ok := got["next"]; ok {
			_ = json.Unmarshal(raw, &cursor)
		}
		if cursor == "" || (!p.all && len(items) >= p.limit) {
			return items, cursor, nil
		}
	}
}

// printList prints a list's items as a table of cols, or as JSON
// {key: items, next}; a next cursor left is told on stderr for a table.
func (c *Client) printList(key string, items []map[string]any, next string, cols ...column) error {
	if c.json {
		out := map[string]any{key: items}
		if items == nil {
			out[key] = []any{}
		}
		if next != "" {
			out["next"] = next
		}
		return c.printJSON(out)
	}
	rows := make([]map[string]any, len(items))
	copy(rows, items)
	c.table(rows, cols...)
	if next != "" {
		fmt.Fprintf(c.err, "(more: -all, a larger -limit, or -cursor %s)\n", next)
	}
	return nil
}
