// Package apitest checks a service against its OpenAPI document: its chi
// router against the document's operations (Routes), and every request and
// response of its HTTP tests against the document's shapes (Handler).
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/go-chi/chi/v5"
)

// Load parses doc and validates it: as OpenAPI 3.1 as far as kin-openapi
// checks that version (the document's structure, its references, its
// schemas under JSON Schema 2020-12, and its examples against them).
func Load(doc []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if !spec.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi %q, want 3.1", spec.OpenAPI)
	}
	if err := spec.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return spec, nil
}

// Operations are the document's operations as "METHOD /path" (the path as
// the document writes it, which is the chi pattern).
func Operations(spec *openapi3.T) []string {
	var out []string
	for path, item := range spec.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// Routes are the routes of r as "METHOD /pattern".
func Routes(r chi.Routes) ([]string, error) {
	var out []string
	err := chi.Walk(r, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, method+" "+pattern)
		return nil
	})
	slices.Sort(out)
	return out, err
}

// anyMethod are methods chi registers for a route of every method
// (r.Handle, as /metrics is), among others of its own (QUERY).
var anyMethod = []string{"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}

func allMethods(ms []string) bool {
	for _, m := range anyMethod {
		if !slices.Contains(ms, m) {
			return false
		}
	}
	return true
}

// CheckRoutes fails t unless the routes of r and the operations of doc are
// the same set. A pattern r serves for every method (r.Handle) counts as
// one route whose GET the document must describe.
func CheckRoutes(t testing.TB, doc []byte, r chi.Routes) {
	t.Helper()
	routes, err := Routes(r)
	if err != nil {
		t.Fatal(err)
	}
	CheckRouteList(t, doc, routes)
}

// CheckRouteList is CheckRoutes over routes as "METHOD /pattern", as
// chi.Walk reports them.
func CheckRouteList(t testing.TB, doc []byte, routes []string) {
	t.Helper()
	spec, err := Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string][]string{}
	for _, rt := range routes {
		method, pattern, _ := strings.Cut(rt, " ")
		methods[pattern] = append(methods[pattern], method)
	}
	ops := Operations(spec)
	var served []string
	for pattern, ms := range methods {
		if allMethods(ms) {
			ms = []string{"GET"}
		}
		for _, m := range ms {
			served = append(served, m+" "+pattern)
			if !slices.Contains(ops, m+" "+pattern) {
				t.Errorf("route %s %s is not in the OpenAPI document", m, pattern)
			}
		}
	}
	for _, op := range ops {
		if !slices.Contains(served, op) {
			t.Errorf("operation %s of the OpenAPI document is no route", op)
		}
	}
	if len(served) == 0 {
		t.Error("the router serves no route")
	}
}

// Checker validates requests and responses against one document.
type Checker struct {
	spec  *openapi3.T
	paths []pathMatcher
}

type pathMatcher struct {
	path   string
	re     *regexp.Regexp
	names  []string
	params int
}

var param = regexp.MustCompile(`\{([^}]+)\}`)

// NewChecker loads and validates doc.
func NewChecker(doc []byte) (*Checker, error) {
	spec, err := Load(doc)
	if err != nil {
		return nil, err
	}
	c := &Checker{spec: spec}
	for _, path := range spec.Paths.InMatchingOrder() {
		m := pathMatcher{path: path}
		var re strings.Builder
		re.WriteString("^")
		rest := path
		for _, loc := range param.FindAllStringSubmatchIndex(path, -1) {
			re.WriteString(regexp.QuoteMeta(rest[:loc[0]-(len(path)-len(rest))]))
			re.WriteString("([^/]+)")
			m.names = append(m.names, path[loc[2]:loc[3]])
			rest = path[loc[1]:]
		}
		re.WriteString(regexp.QuoteMeta(rest))
		re.WriteString("$")
		m.re, m.params = regexp.MustCompile(re.String()), len(m.names)
		c.paths = append(c.paths, m)
	}
	// Literal segments first: /x/stats before /x/{id}.
	slices.SortStableFunc(c.paths, func(a, b pathMatcher) int { return a.params - b.params })
	return c, nil
}

// route finds the operation of a request: its path as routed (escaped).
func (c *Checker) route(r *http.Request) (*routers.Route, map[string]string, bool) {
	path := r.URL.EscapedPath()
	for _, m := range c.paths {
		sub := m.re.FindStringSubmatch(path)
		if sub == nil {
			continue
		}
		item := c.spec.Paths.Value(m.path)
		op := item.GetOperation(r.Method)
		if op == nil {
			return nil, nil, false
		}
		params := map[string]string{}
		for i, name := range m.names {
			v, err := url.PathUnescape(sub[i+1])
			if err != nil {
				v = sub[i+1]
			}
			params[name] = v
		}
		return &routers.Route{Spec: c.spec, Path: m.path, PathItem: item, Method: r.Method, Operation: op}, params, true
	}
	return nil, nil, false
}

// Check validates one exchange: the request r (with its body) and the
// response status, header and body. A request the document refuses must
// have been refused (4xx, a documented status of the operation, and a
// documented problem); a request it admits must have a documented status,
// headers and body. A request to no documented operation must have been
// answered 404 or 405 with a problem.
func (c *Checker) Check(r *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	route, params, ok := c.route(r)
	if !ok {
		if (status == http.StatusNotFound || status == http.StatusMethodNotAllowed) &&
			strings.HasPrefix(header.Get("Content-Type"), "application/problem+json") {
			return nil
		}
		return fmt.Errorf("%s %s: no operation of the document, and the answer is %d, not a 404 or 405 problem", r.Method, r.URL.Path, status)
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if len(reqBody) > 0 && req.Header.Get("Content-Type") == "" {
		// httpx.DecodeJSON reads a body without Content-Type as JSON.
		req.Header.Set("Content-Type", "application/json")
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr == nil {
		reqErr = undocumentedQuery(route.Operation, route.PathItem, req.URL.Query())
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	respErr := openapi3filter.ValidateResponse(context.Background(), out)
	what := fmt.Sprintf("%s %s (operation %s) answered %d", r.Method, r.URL.RequestURI(), route.Operation.OperationID, status)
	if reqErr != nil && status == http.StatusOK && route.Operation.Extensions["x-item-results"] == true {
		// A batch judges each item on its own: an item the schema refuses
		// is refused in its result (documented there), not the batch.
		reqErr = nil
	}
	switch {
	case reqErr != nil && status < 400:
		return fmt.Errorf("%s, but the document refuses the request: %v\nrequest body: %s", what, reqErr, clip(reqBody))
	case reqErr != nil && status >= 500:
		return fmt.Errorf("%s to a request the document refuses (%v): want a 4xx problem", what, reqErr)
	case respErr != nil:
		return fmt.Errorf("%s: the response is not as documented: %v\nbody: %s", what, respErr, clip(body))
	}
	return nil
}

// undocumentedQuery refuses query parameters the operation does not name.
func undocumentedQuery(op *openapi3.Operation, item *openapi3.PathItem, q url.Values) error {
	known := map[string]bool{}
	for _, ps := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, p := range ps {
			if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
				known[p.Value.Name] = true
			}
		}
	}
	for name := range q {
		if !known[name] {
			return fmt.Errorf("query parameter %q is not documented", name)
		}
	}
	return nil
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

// Handler returns h behind a check of every exchange against doc: a
// request or response not as documented fails t (Errorf; the exchange
// itself goes through unchanged). Wrap the handler an HTTP test serves.
func Handler(t testing.TB, doc []byte, h http.Handler) http.Handler {
	t.Helper()
	c, err := checkerOf(doc)
	if err != nil {
		t.Fatal(err)
	}
	return c.Handler(t, h)
}

var checkers sync.Map // string(doc) -> *Checker

func checkerOf(doc []byte) (*Checker, error) {
	if c, ok := checkers.Load(string(doc)); ok {
		return c.(*Checker), nil
	}
	c, err := NewChecker(doc)
	if err != nil {
		return nil, err
	}
	checkers.Store(string(doc), c)
	return c, nil
}

// Handler is the package's Handler with this checker.
func (c *Checker) Handler(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("apitest: read the request body: %v", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if err := c.Check(r, reqBody, rec.status, w.Header().Clone(), rec.body.Bytes()); err != nil {
			t.Errorf("apitest: %v", err)
		}
	})
}

// recorder passes a response through while keeping a copy.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
