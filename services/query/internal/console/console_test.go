package console_test

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/console"
	"github.com/usagebilling/billing/services/query/internal/operator"
	"github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(m))) }

// fixture is the console on a real query database behind auth.Middleware,
// as the query service mounts it, with the development key.
type fixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	op   *operator.Operator
	srv  *httptest.Server
}

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, nil) }

// newFixtureWith reaches the other services' internal endpoints at urls,
// by service name as SERVICE_URLS gives them (nil: none configured).
func newFixtureWith(t *testing.T, urls map[string]string) *fixture {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pgtest.NewDB(t, querytest.Template))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newFixtureOn(t, pool, urls, console.Config{})
}

// newFixtureOn is a console with cfg on pool (a replica when another
// fixture serves the same pool).
func newFixtureOn(t *testing.T, pool *pgxpool.Pool, urls map[string]string, cfg console.Config) *fixture {
	t.Helper()
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	a := app.New(app.Deps{Pool: pool}, app.Config{})
	op := operator.New(pool, ops.NewClient(nil, keys, operator.Self), a.Reconciliation(), nil)
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, nil))
	c, err := console.New(op, operator.NewWebhooks(pool, urls[operator.WebhookService], keys, nil), operator.NewAccounts(urls, keys),
		a, keys, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &fixture{t: t, pool: pool, op: op, srv: srv}
}

// response is an answer read whole.
type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request with the given cookie (empty: none), following no
// redirect.
func (f *fixture) do(method, path, cookie string, form url.Values) response {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: cookie})
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// signIn signs in with token and returns the session cookie's value.
func (f *fixture) signIn(token string) string {
	f.t.Helper()
	resp := f.do("POST", "/console/sign-in", "", url.Values{"token": {token}})
	if resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/console" {
		f.t.Fatalf("sign-in: %d %v %s", resp.status, resp.header, resp.body)
	}
	c := sessionCookie(f.t, resp)
	return c.Value
}

func sessionCookie(t *testing.T, resp response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: resp.header}).Cookies() {
		if c.Name == console.CookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", console.CookieName, resp.header)
	return nil
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the form token of a signed-in page.
func csrf(t *testing.T, page response) string {
	t.Helper()
	m := csrfInput.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no csrf field in %s", page.body)
	}
	return m[1]
}

func token(t *testing.T, sub, role, tenant string, ttl time.Duration) string {
	t.Helper()
	s, err := auth.Token(auth.DevKey, auth.NewClaims(sub, role, tenant, ttl))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// quarantine records the EventQuarantined notice a service would publish,
// through the operator's own handler in the real inbox.
func (f *fixture) quarantine(service, tenant, reason string) uuid.UUID {
	f.t.Helper()
	ib := querytest.NewInboxWith(f.t, f.op.Handlers())
	id := uuid.New()
	sum := sha256.Sum256(id[:])
	raw := hex.EncodeToString(sum[:])
	p := events.EventQuarantined{Service: service, EventID: id.String(), EventType: events.TypeUsageAccepted,
		EventTenantID: tenant, Reason: reason, Topic: events.TopicUsage, QuarantinedAt: time.Now().UTC(), RawSHA256: raw}
	env, err := envelope.New(envelope.Meta{EventType: events.TypeEventQuarantined, SchemaVersion: 1, TenantID: events.OpsTenant,
		AggregateType: events.AggregateOps, AggregateID: events.QuarantineAggregateID(service, raw), AggregateVersion: 1,
		OccurredAt: p.QuarantinedAt, Producer: service}, p)
	if err != nil {
		f.t.Fatal(err)
	}
	if ds := querytest.Decide(f.t, f.pool, ib, querytest.Event{Topic: events.TopicOps, Envelope: env}); ds[0].Outcome != inbox.OutcomeApplied {
		f.t.Fatalf("notice decided %+v", ds[0])
	}
	if service == operator.Self { // query's own inbox holds what it announced
		if _, err := f.pool.Exec(f.t.Context(), `INSERT INTO inbox_quarantine (raw_sha256, event_id, event_type, tenant_id, reason, raw, topic, partition, "offset")
			VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 0)`, raw, id, events.TypeUsageAccepted, tenant, reason, id[:], events.TopicUsage); err != nil {
			f.t.Fatal(err)
		}
	}
	return id
}

func (f *fixture) auditRows() int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(f.t.Context(), `SELECT count(*) FROM redrive_audit`).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// Without a session every page redirects to the sign-in page and shows no
// data; a bearer header does not stand in for the cookie, and a cookie
// holding a tenant's, an expired or a forged token is no session.
func TestNoDataWithoutASession(t *testing.T) {
	f := newFixture(t)
	f.quarantine("billing", "acme", "unsupported_schema")
	forger, err := auth.GenerateKey(auth.DevKey.ID) // the development key's id, another key
	if err != nil {
		t.Fatal(err)
	}
	forged, err := auth.Token(forger, auth.NewClaims("mallory", auth.RoleOperator, "", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cookies := map[string]string{
		"none":    "",
		"tenant":  token(t, "bob", auth.RoleTenant, "acme", time.Hour),
		"expired": token(t, "alice", auth.RoleOperator, "", -time.Hour),
		"forged":  forged,
		"garbage": "not-a-token",
	}
	paths := []string{"/console", "/console/", "/console/quarantine", "/console/dead-letters",
		"/console/reconciliation?tenantId=acme", "/console/tenants?tenantId=acme", "/console/catalog", "/console/redrives/" + uuid.NewString()}
	for name, cookie := range cookies {
		for _, p := range paths {
			resp := f.do("GET", p, cookie, nil)
			if resp.status != http.StatusSeeOther || !strings.HasPrefix(resp.header.Get("Location"), "/console/sign-in") {
				t.Errorf("%s cookie, GET %s: %d %s, want a redirect to sign-in", name, p, resp.status, resp.header.Get("Location"))
			}
			if strings.Contains(resp.body, "acme") || strings.Contains(resp.body, "billing") {
				t.Errorf("%s cookie, GET %s: data in %s", name, p, resp.body)
			}
		}
	}
	// An operator's bearer header is the API's credential, not the console's.
	req, _ := http.NewRequest("GET", f.srv.URL+"/console/quarantine", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, "alice", auth.RoleOperator, "", time.Hour))
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("bearer header only: %d, want the sign-in redirect", resp.StatusCode)
	}
	if page := f.do("GET", "/console/sign-in", "", nil); page.status != 200 || !strings.Contains(page.body, `id="sign-in"`) {
		t.Errorf("sign-in page: %d %s", page.status, page.body)
	}
}

// Sign-in takes only an operator token, and keeps it in an HttpOnly,
// SameSite=Strict cookie scoped to /console that expires with the token,
// Secure when the request came over TLS.
func TestSignIn(t *testing.T) {
	f := newFixture(t)
	refused := []struct {
		name, token string
		status      int
	}{
		{"tenant", token(t, "bob", auth.RoleTenant, "acme", time.Hour), http.StatusForbidden},
		{"service", auth.DevToken(auth.RoleService, ""), http.StatusForbidden},
		{"expired", token(t, "alice", auth.RoleOperator, "", -time.Hour), http.StatusUnauthorized},
		{"garbage", "garbage", http.StatusUnauthorized},
		{"empty", "", http.StatusUnauthorized},
	}
	for _, tt := range refused {
		resp := f.do("POST", "/console/sign-in", "", url.Values{"token": {tt.token}})
		if resp.status != tt.status || resp.header.Get("Set-Cookie") != "" || !strings.Contains(resp.body, `id="message"`) {
			t.Errorf("%s token: %d, cookie %q, want %d, no cookie and a message", tt.name, resp.status, resp.header.Get("Set-Cookie"), tt.status)
		}
	}

	tok := token(t, "alice@ops.example", auth.RoleOperator, "", time.Hour)
	// A browser posting from another origin (another port is another one).
	for origin, want := range map[string]int{"http://127.0.0.1:1": http.StatusForbidden, "null": http.StatusForbidden,
		f.srv.URL: http.StatusSeeOther} {
		req, _ := http.NewRequest("POST", f.srv.URL+"/console/sign-in", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || (want != http.StatusSeeOther && len(resp.Cookies()) != 0) {
			t.Errorf("sign-in with Origin %s: %d, cookies %v; want %d", origin, resp.StatusCode, resp.Cookies(), want)
		}
	}
	resp := f.do("POST", "/console/sign-in", "", url.Values{"token": {"Bearer " + tok}})
	if resp.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", resp.status, resp.body)
	}
	c := sessionCookie(t, resp)
	claims, _ := auth.NewKeys(auth.DevKey)
	cl, err := claims.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Value != tok || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/console" ||
		!c.Expires.Equal(cl.ExpiresAt.Time.Truncate(time.Second)) {
		t.Errorf("cookie %+v", c)
	}
	page := f.do("GET", "/console", c.Value, nil)
	if page.status != 200 || !strings.Contains(page.body, `<b id="actor">alice@ops.example</b>`) || !strings.Contains(page.body, `data-service="query"`) {
		t.Errorf("recovery after sign-in: %d %s", page.status, page.body)
	}
	for _, h := range []string{"Cache-Control", "Content-Security-Policy", "X-Content-Type-Options"} {
		if page.header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}

	// Over TLS the cookie is Secure.
	tlsSrv := httptest.NewTLSServer(f.srv.Config.Handler)
	defer tlsSrv.Close()
	client := tlsSrv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test server
	tr, err := client.PostForm(tlsSrv.URL+"/console/sign-in", url.Values{"token": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	tr.Body.Close()
	if cs := tr.Cookies(); len(cs) != 1 || !cs[0].Secure || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie over TLS: %+v", cs)
	}
}

// A POST behind the sign-in needs its session's form token: none, another
// session's, or a GET-made guess is refused with nothing done; the right
// one submits a redrive through operator.Submit with a console correlation
// id and shows its audit.
func TestCSRFAndRedrive(t *testing.T) {
	f := newFixture(t)
	id := f.quarantine(operator.Self, "acme", "unsupported_schema")
	alice := f.signIn(token(t, "alice@ops.example", auth.RoleOperator, "", time.Hour))
	bob := f.signIn(token(t, "bob@ops.example", auth.RoleOperator, "", time.Hour))
	page := f.do("GET", "/console/quarantine", alice, nil)
	if page.status != 200 || !strings.Contains(page.body, `data-event="`+id.String()+`"`) {
		t.Fatalf("quarantine page: %d %s", page.status, page.body)
	}
	aliceCSRF, bobCSRF := csrf(t, page), csrf(t, f.do("GET", "/console", bob, nil))
	form := func(token string) url.Values {
		v := url.Values{"service": {operator.Self}, "eventId": {id.String()}, "reason": {"decoder fixed"}}
		if token != "" {
			v.Set(console.CSRFField, token)
		}
		return v
	}
	for name, tok := range map[string]string{"no token": "", "another session's": bobCSRF, "made up": "AAAA"} {
		resp := f.do("POST", "/console/redrives", alice, form(tok))
		if resp.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.status)
		}
	}
	if resp := f.do("POST", "/console/sign-out", alice, url.Values{}); resp.status != http.StatusForbidden {
		t.Errorf("sign-out without a token: %d, want 403", resp.status)
	}
	if n := f.auditRows(); n != 0 {
		t.Fatalf("%d audit rows after refused posts", n)
	}

	resp := f.do("POST", "/console/redrives", alice, form(aliceCSRF))
	loc := resp.header.Get("Location")
	if resp.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/redrives/") {
		t.Fatalf("redrive: %d %s %s", resp.status, loc, resp.body)
	}
	rd, err := f.op.Redrive(t.Context(), uuid.MustParse(strings.TrimPrefix(loc, "/console/redrives/")))
	if err != nil {
		t.Fatal(err)
	}
	a := rd.Audit[0]
	if rd.Service != operator.Self || rd.EventID != id || rd.Action != events.ActionRedrive || a.Actor != "alice@ops.example" ||
		a.Reason != "decoder fixed" || !strings.HasPrefix(a.CorrelationID, "console-") {
		t.Errorf("redrive %+v", rd)
	}
	view := f.do("GET", loc, alice, nil)
	if view.status != 200 || !strings.Contains(view.body, `<td id="state">requested</td>`) ||
		!strings.Contains(view.body, a.CorrelationID) || !strings.Contains(view.body, `http-equiv="refresh"`) {
		t.Errorf("redrive page: %d %s", view.status, view.body)
	}
	// The page of a redrive is at its id's canonical spelling only.
	for _, other := range []string{"%7B" + rd.ID.String() + "%7D", "urn:uuid:" + rd.ID.String(), strings.ReplaceAll(rd.ID.String(), "-", "")} {
		if view := f.do("GET", "/console/redrives/"+other, alice, nil); view.status != http.StatusNotFound {
			t.Errorf("redrive page at %s: %d, want 404", other, view.status)
		}
	}

	// Invalid forms are refused before the operator package, and write
	// nothing.
	audited := f.auditRows()
	for name, v := range map[string]url.Values{
		"no reason":       {"service": {operator.Self}, "eventId": {id.String()}},
		"bad event id":    {"service": {operator.Self}, "eventId": {"x"}, "reason": {"r"}},
		"nil event id":    {"service": {operator.Self}, "eventId": {uuid.Nil.String()}, "reason": {"r"}},
		"braced event id": {"service": {operator.Self}, "eventId": {"{" + id.String() + "}"}, "reason": {"r"}},
		"urn event id":    {"service": {operator.Self}, "eventId": {"urn:uuid:" + id.String()}, "reason": {"r"}},
		"bare event id":   {"service": {operator.Self}, "eventId": {strings.ReplaceAll(id.String(), "-", "")}, "reason": {"r"}},
		"BEL in reason":   {"service": {operator.Self}, "eventId": {id.String()}, "reason": {"r\a"}},
		"ESC in reason":   {"service": {operator.Self}, "eventId": {id.String()}, "reason": {"\x1b[2Jr"}},
		"long reason":     {"service": {operator.Self}, "eventId": {id.String()}, "reason": {strings.Repeat("é", 501)}},
		"unknown service": {"service": {"nope"}, "eventId": {id.String()}, "reason": {"r"}},
	} {
		v.Set(console.CSRFField, aliceCSRF)
		if resp := f.do("POST", "/console/redrives", alice, v); resp.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, resp.status)
		}
	}
	// An event query does not hold (a typo): 404, nothing audited.
	unknown := url.Values{"service": {operator.Self}, "eventId": {uuid.NewString()}, "reason": {"r"}, console.CSRFField: {aliceCSRF}}
	if resp := f.do("POST", "/console/redrives", alice, unknown); resp.status != http.StatusNotFound ||
		!strings.Contains(resp.body, "holds no quarantined event") {
		t.Errorf("an unknown event: %d %s, want 404", resp.status, resp.body)
	}
	mallory := f.signIn(token(t, "mal\x1b[31mlory", auth.RoleOperator, "", time.Hour))
	malloryForm := form(csrf(t, f.do("GET", "/console", mallory, nil)))
	if resp := f.do("POST", "/console/redrives", mallory, malloryForm); resp.status != http.StatusBadRequest {
		t.Errorf("an actor with ESC: %d, want 400", resp.status)
	}
	if n := f.auditRows(); n != audited {
		t.Errorf("refused forms wrote %d audit rows", n-audited)
	}

	// Signing out clears the cookie.
	out := f.do("POST", "/console/sign-out", alice, url.Values{console.CSRFField: {aliceCSRF}})
	if c := sessionCookie(t, out); out.status != http.StatusSeeOther || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("sign-out: %d %+v", out.status, c)
	}
}

// The quarantine page filters by service, reason and tenant, pages, and
// escapes what it shows.
func TestQuarantinePage(t *testing.T) {
	f := newFixture(t)
	a := f.quarantine("billing", "acme", "unsupported_schema")
	b := f.quarantine(operator.Self, "beta", "<script>alert(1)</script>")
	alice := f.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour))
	listed := func(query string) (bool, bool, string) {
		t.Helper()
		page := f.do("GET", "/console/quarantine?"+query, alice, nil)
		if page.status != 200 {
			t.Fatalf("%s: %d %s", query, page.status, page.body)
		}
		return strings.Contains(page.body, a.String()), strings.Contains(page.body, b.String()), page.body
	}
	tests := []struct {
		query        string
		wantA, wantB bool
	}{
		{"", true, true},
		{"service=billing", true, false},
		{"service=query", false, true},
		{"reason=unsupported_schema", true, false},
		{"tenantId=beta", false, true},
		{"tenantId=gamma", false, false},
	}
	for _, tt := range tests {
		if gotA, gotB, _ := listed(tt.query); gotA != tt.wantA || gotB != tt.wantB {
			t.Errorf("%q: listed a %v, b %v; want %v, %v", tt.query, gotA, gotB, tt.wantA, tt.wantB)
		}
	}
	_, _, body := listed("tenantId=beta")
	if strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("reason not escaped: %s", body)
	}
	for range console.PageSize + 3 {
		f.quarantine("usage", "gamma", "malformed")
	}
	page := f.do("GET", "/console/quarantine?tenantId=gamma", alice, nil)
	next := regexp.MustCompile(`href="(/console/quarantine\?[^"]+)" id="next"`).FindStringSubmatch(page.body)
	if next == nil || strings.Count(page.body, `data-service="usage"`) != console.PageSize {
		t.Fatalf("first page: want %d rows and a next link in %s", console.PageSize, page.body)
	}
	if second := f.do("GET", html.UnescapeString(next[1]), alice, nil); second.status != 200 ||
		strings.Count(second.body, `data-service="usage"`) != 3 || strings.Contains(second.body, `id="next"`) {
		t.Errorf("second page of gamma: %d %s", second.status, second.body)
	}
	if bad := f.do("GET", "/console/quarantine?after=-1", alice, nil); bad.status != http.StatusBadRequest {
		t.Errorf("after=-1: %d", bad.status)
	}
}

// The tenant page shows query's summary of the tenant's projected events.
func TestTenantSummaryPage(t *testing.T) {
	f := newFixture(t)
	feed := querytest.NewFeed(t, "acme")
	querytest.Decide(t, f.pool, querytest.NewInbox(t), feed.Usage("api_calls", "USD", "3"), feed.Usage("api_calls", "USD", "4.5"))
	alice := f.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour))
	page := f.do("GET", "/console/tenants?tenantId=acme", alice, nil)
	if page.status != 200 || !strings.Contains(page.body, `<td class="n" id="usage-count">2</td>`) ||
		!strings.Contains(page.body, `<td>api_calls</td><td class="n">7.5</td>`) {
		t.Errorf("summary page: %d %s", page.status, page.body)
	}
	if bad := f.do("GET", "/console/tenants?tenantId=no/such", alice, nil); bad.status != http.StatusBadRequest {
		t.Errorf("invalid tenant id: %d", bad.status)
	}
	if bad := f.do("GET", "/console/reconciliation?tenantId=acme&period=2026-13", alice, nil); bad.status != http.StatusBadRequest {
		t.Errorf("invalid period: %d", bad.status)
	}
}

// Two replicas behind one address: with the same QUERY_CONSOLE_CSRF_KEY_FILE
// a form one rendered is accepted by the other (a redrive goes through); with
// keys of their own (nothing configured) it is refused, nothing done. A key
// under 32 bytes is refused at start.
func TestReplicasShareTheConsoleByItsKey(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), pgtest.NewDB(t, querytest.Template))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	key := []byte(strings.Repeat("k", console.MinCSRFKey))
	a, b := newFixtureOn(t, pool, nil, console.Config{CSRFKey: key}), newFixtureOn(t, pool, nil, console.Config{CSRFKey: key})
	lone := newFixtureOn(t, pool, nil, console.Config{})
	id := a.quarantine(operator.Self, "acme", "unsupported_schema")
	alice := a.signIn(token(t, "alice@ops.example", auth.RoleOperator, "", time.Hour))
	formFrom := csrf(t, a.do("GET", "/console/quarantine", alice, nil))
	form := url.Values{console.CSRFField: {formFrom}, "service": {operator.Self}, "eventId": {id.String()}, "reason": {"decoder fixed"}}
	if resp := lone.do("POST", "/console/redrives", alice, form); resp.status != http.StatusForbidden {
		t.Errorf("a replica with its own key: %d, want 403", resp.status)
	}
	if n := a.auditRows(); n != 0 {
		t.Fatalf("%d audit rows after the refused post", n)
	}
	if resp := b.do("POST", "/console/redrives", alice, form); resp.status != http.StatusSeeOther ||
		!strings.HasPrefix(resp.header.Get("Location"), "/console/redrives/") {
		t.Errorf("the other replica with the same key: %d %s, want the redrive", resp.status, resp.header.Get("Location"))
	}
	if _, err := console.New(nil, nil, nil, nil, auth.Keys{}, console.Config{CSRFKey: key[:31]}, nil); err == nil {
		t.Error("a 31-byte key accepted")
	}
}

// Behind a proxy that terminates TLS the request is plain HTTP: the
// session cookie is Secure only with QUERY_CONSOLE_SECURE_COOKIE.
func TestSecureCookieBehindTLSTerminatedInFront(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), pgtest.NewDB(t, querytest.Template))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tok := token(t, "alice", auth.RoleOperator, "", time.Hour)
	for _, secure := range []bool{false, true} {
		f := newFixtureOn(t, pool, nil, console.Config{SecureCookie: secure})
		resp := f.do("POST", "/console/sign-in", "", url.Values{"token": {tok}})
		if c := sessionCookie(t, resp); c.Secure != secure {
			t.Errorf("SecureCookie %v: the cookie's Secure is %v", secure, c.Secure)
		}
	}
}

// The catalog page lists query's copy of the catalog, escaped, a page of
// PageSize by code with a link to the next; a bad after is refused.
func TestCatalogPage(t *testing.T) {
	f := newFixture(t)
	alice := f.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour))
	if page := f.do("GET", "/console/catalog", alice, nil); page.status != 200 || !strings.Contains(page.body, "No meter yet.") {
		t.Fatalf("empty catalog: %d %s", page.status, page.body)
	}
	evs := []querytest.Event{querytest.Meter(t, "llm_tokens", "sum", "tokens", "model", "region"),
		querytest.Meter(t, "active_users", "unique_count", "user_id")}
	for i := range console.PageSize {
		evs = append(evs, querytest.Meter(t, fmt.Sprintf("m%03d", i), "count", ""))
	}
	querytest.Decide(t, f.pool, querytest.NewInbox(t), evs...)
	page := f.do("GET", "/console/catalog", alice, nil)
	for _, want := range []string{
		`<tr data-meter="active_users"><td>active_users</td><td>unique_count</td><td>user_id</td>`,
		`<tr data-meter="llm_tokens"><td>llm_tokens</td><td>sum</td><td>tokens</td>` + "\n<td>model, region</td><td>llm_tokens</td>",
		`<a href="/console/catalog?after=m047" id="next">`,
	} {
		if page.status != 200 || !strings.Contains(page.body, want) {
			t.Errorf("catalog page: %d, no %q in\n%s", page.status, want, page.body)
		}
	}
	if n := strings.Count(page.body, "<tr data-meter="); n != console.PageSize {
		t.Errorf("first page: %d meters, want %d", n, console.PageSize)
	}
	next := f.do("GET", "/console/catalog?after=m047", alice, nil)
	if n := strings.Count(next.body, "<tr data-meter="); next.status != 200 || n != 2 || strings.Contains(next.body, `id="next"`) ||
		!strings.Contains(next.body, `data-meter="m049"`) {
		t.Errorf("second page: %d, %d meters: %s", next.status, n, next.body)
	}
	for _, after := range []string{strings.Repeat("m", 65), "%00", "a%20b", "%FF"} {
		if bad := f.do("GET", "/console/catalog?after="+after, alice, nil); bad.status != http.StatusBadRequest {
			t.Errorf("after=%s: %d, want 400", after, bad.status)
		}
	}
}

// The dead-letter page lists the outbox dead letters (escaped) and releases
// one through operator.Submit with the release action; reconciliation names
// an unreachable service instead of showing counts.
func TestDeadLettersPage(t *testing.T) {
	f := newFixture(t)
	feed := querytest.NewFeed(t, "acme")
	ev := feed.Usage("api_calls", "USD", "1").Envelope
	err := pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error { return outbox.Append(t.Context(), tx, events.TopicUsage, ev) })
	if err != nil {
		t.Fatal(err)
	}
	// A dead letter as the relay makes one: dead_at set, its pending entry deleted.
	if _, err := f.pool.Exec(t.Context(), `UPDATE outbox_event SET dead_at = now(), attempts = 10, last_error = '<b>refused</b>';
		DELETE FROM outbox_pending`); err != nil {
		t.Fatal(err)
	}
	alice := f.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour))
	page := f.do("GET", "/console/dead-letters", alice, nil)
	if page.status != 200 || !strings.Contains(page.body, `data-event="`+ev.EventID.String()+`"`) ||
		!strings.Contains(page.body, "&lt;b&gt;refused&lt;/b&gt;") {
		t.Fatalf("dead letters: %d %s", page.status, page.body)
	}
	if other := f.do("GET", "/console/dead-letters?service=nope", alice, nil); other.status != http.StatusBadRequest {
		t.Errorf("unknown service: %d", other.status)
	}
	resp := f.do("POST", "/console/dead-letters/release", alice, url.Values{"service": {operator.Self},
		"eventId": {ev.EventID.String()}, "reason": {"broker fixed"}, console.CSRFField: {csrf(t, page)}})
	loc := resp.header.Get("Location")
	if resp.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/redrives/") {
		t.Fatalf("release: %d %s", resp.status, resp.body)
	}
	rd, err := f.op.Redrive(t.Context(), uuid.MustParse(strings.TrimPrefix(loc, "/console/redrives/")))
	if err != nil || rd.Action != events.ActionRedriveDeadLetter || rd.EventID != ev.EventID || rd.Audit[0].Reason != "broker fixed" {
		t.Errorf("release %+v, %v", rd, err)
	}
	if rec := f.do("GET", "/console/reconciliation?tenantId=acme", alice, nil); rec.status != http.StatusBadGateway ||
		!strings.Contains(rec.body, `id="error"`) {
		t.Errorf("reconciliation without billing: %d %s", rec.status, rec.body)
	}
}

// The webhook page shows the invoice service's intent counts and intents
// (escaped), and a retry goes through operator.Webhooks.Retry: audited in
// query's database, answered by the invoice service, shown on the redrive
// page. The invoice service is a stand-in HTTP server here (its own tests
// cover delivery); it checks the service token query sends.
func TestWebhooksPage(t *testing.T) {
	failed, accepted := uuid.New(), uuid.New()
	var retried string
	invoice := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys, _ := auth.NewKeys(auth.DevKey)
		if c, err := keys.Verify(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); err != nil || !c.Has(auth.RoleService) {
			http.Error(w, "no service token", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/internal/v1/webhook-intents/stats":
			_, _ = io.WriteString(w, `{"byStatus":{"failed":1,"accepted":1},"oldestPendingAgeSeconds":0}`)
		case "/internal/v1/webhook-intents":
			_, _ = io.WriteString(w, `{"items":[
				{"intentId":"`+failed.String()+`","tenantId":"acme","eventType":"InvoiceIssued","url":"https://hooks.example/x","status":"failed","attempts":8,"lastStatusCode":500,"lastError":"<i>boom</i>","createdAt":"2026-11-30T10:00:00Z","expiresAt":"2026-12-01T10:00:00Z"},
				{"intentId":"`+accepted.String()+`","tenantId":"acme","eventType":"InvoiceIssued","url":"https://hooks.example/x","status":"accepted","attempts":1,"createdAt":"2026-11-30T10:00:00Z","expiresAt":"2026-12-01T10:00:00Z"}],
				"next":"c2"}`)
		case "/internal/v1/webhook-intents/" + failed.String():
			_, _ = io.WriteString(w, `{"intentId":"`+failed.String()+`","status":"failed"}`)
		case "/internal/v1/webhook-intents/" + failed.String() + "/retry":
			retried = r.Method
			_, _ = io.WriteString(w, `{"intentId":"`+failed.String()+`","outcome":"rescheduled","status":"pending"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer invoice.Close()
	f := newFixtureWith(t, map[string]string{operator.WebhookService: invoice.URL})
	alice := f.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour))
	page := f.do("GET", "/console/webhooks?status=failed", alice, nil)
	if page.status != 200 || !strings.Contains(page.body, `data-intent="`+failed.String()+`"`) ||
		!strings.Contains(page.body, "&lt;i&gt;boom&lt;/i&gt;") || !strings.Contains(page.body, `data-status="failed">1<`) ||
		!strings.Contains(page.body, `action="/console/webhooks/`+failed.String()+`/retry"`) ||
		strings.Contains(page.body, `action="/console/webhooks/`+accepted.String()+`/retry"`) ||
		!strings.Contains(page.body, `href="/console/webhooks?cursor=c2&amp;status=failed" id="next"`) {
		t.Fatalf("webhooks page: %d %s", page.status, page.body)
	}
	if bad := f.do("GET", "/console/webhooks?status=lost", alice, nil); bad.status != http.StatusBadRequest {
		t.Errorf("unknown status: %d", bad.status)
	}
	resp := f.do("POST", "/console/webhooks/"+failed.String()+"/retry", alice, url.Values{"reason": {"endpoint fixed"},
		console.CSRFField: {csrf(t, page)}})
	loc := resp.header.Get("Location")
	if resp.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/redrives/") || retried != http.MethodPost {
		t.Fatalf("retry: %d %s %s (invoice saw %q)", resp.status, loc, resp.body, retried)
	}
	rd, err := f.op.Redrive(t.Context(), uuid.MustParse(strings.TrimPrefix(loc, "/console/redrives/")))
	if err != nil || rd.Action != operator.ActionRetryWebhookIntent || rd.Outcome != "rescheduled" || len(rd.Audit) != 2 ||
		rd.Audit[0].Actor != "alice" || !strings.HasPrefix(rd.Audit[0].CorrelationID, "console-") {
		t.Errorf("retry audit %+v, %v", rd, err)
	}
	if view := f.do("GET", loc, alice, nil); view.status != 200 || !strings.Contains(view.body, "rescheduled") {
		t.Errorf("retry's redrive page: %d", view.status)
	}
	g := newFixture(t)
	if other := g.do("GET", "/console/webhooks", g.signIn(token(t, "a", auth.RoleOperator, "", time.Hour)), nil); other.status != http.StatusBadGateway {
		t.Errorf("without an invoice URL: %d, want 502", other.status)
	}
}

// The tenants page shows the tenant's subscriptions (the billing
// service's) and credit grants (the invoice service's), the first
// console.AccountRows of each, read with one call each per view through
// their internal routes with query's service token, and says when there are
// more. A service that refuses or cannot be reached leaves a note in its
// table's place, the rest of the page shown. The services are stand-in HTTP
// servers here (their own tests cover the routes).
func TestTenantAccountsPage(t *testing.T) {
	sub, grant := uuid.New(), uuid.New()
	var mu sync.Mutex
	calls := map[string][]string{} // by service: the request URIs
	stand := func(service, path, body string, status int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			keys, _ := auth.NewKeys(auth.DevKey)
			if c, err := keys.Verify(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); err != nil ||
				!c.Has(auth.RoleService) || !slices.Contains(c.Audience, service) {
				http.Error(w, "no service token", http.StatusUnauthorized)
				return
			}
			mu.Lock()
			calls[service] = append(calls[service], r.URL.RequestURI())
			mu.Unlock()
			if r.Method != http.MethodGet || r.URL.Path != path {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	billing := stand("billing", "/internal/v1/tenants/acme/subscriptions", `{"subscriptions":[
		{"subscriptionId":"`+sub.String()+`","tenantId":"acme","planCode":"<b>pro</b>","startsAt":"2026-11-01T00:00:00Z","endsAt":"2026-12-01T00:00:00Z","createdAt":"2026-10-30T00:00:00Z","actor":"a"},
		{"subscriptionId":"`+uuid.NewString()+`","tenantId":"acme","planCode":"basic","startsAt":"2026-12-01T00:00:00Z","createdAt":"2026-10-30T00:00:00Z","actor":"a"}],
		"next":"c2"}`, http.StatusOK)
	invoice := stand("invoice", "/internal/v1/tenants/acme/credit-grants", `{"grants":[
		{"grantId":"`+grant.String()+`","tenantId":"acme","currency":"USD","amount":"500.00","balance":"125.50","status":"active","effectiveAt":"2026-11-02T09:00:00Z","priority":3,"reason":"prepaid","actor":"a","createdAt":"2026-11-02T09:00:00Z"}]}`,
		http.StatusOK)
	f := newFixtureWith(t, map[string]string{"billing": billing.URL, "invoice": invoice.URL})
	alice := f.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour))
	page := f.do("GET", "/console/tenants?tenantId=acme", alice, nil)
	for _, want := range []string{
		`<tr data-subscription="` + sub.String() + `"><td>&lt;b&gt;pro&lt;/b&gt;</td><td>2026-11-01 00:00:00Z</td><td>2026-12-01 00:00:00Z</td></tr>`,
		`<td>basic</td><td>2026-12-01 00:00:00Z</td><td>—</td>`,
		`id="subscriptions-more">The first 100 subscriptions`,
		`<tr data-grant="` + grant.String() + `"><td>USD</td><td class="n">500.00</td><td class="n">125.50</td><td>active</td><td class="n">3</td><td>2026-11-02 09:00:00Z</td><td>never</td></tr>`,
		`id="usage-count">0<`,
	} {
		if page.status != 200 || !strings.Contains(page.body, want) {
			t.Fatalf("tenants page: want %s in %d %s", want, page.status, page.body)
		}
	}
	if strings.Contains(page.body, `id="credit-grants-more"`) || strings.Contains(page.body, `-error"`) {
		t.Errorf("tenants page: a note it should not have: %s", page.body)
	}
	mu.Lock()
	if want := []string{"/internal/v1/tenants/acme/subscriptions?limit=100"}; !slices.Equal(calls["billing"], want) {
		t.Errorf("billing saw %v, want %v", calls["billing"], want)
	}
	if want := []string{"/internal/v1/tenants/acme/credit-grants?limit=100"}; !slices.Equal(calls["invoice"], want) {
		t.Errorf("invoice saw %v, want %v", calls["invoice"], want)
	}
	mu.Unlock()
	if blank := f.do("GET", "/console/tenants", alice, nil); blank.status != 200 || strings.Contains(blank.body, `id="subscriptions"`) {
		t.Errorf("tenants page before a tenant is asked: %d %s", blank.status, blank.body)
	}

	refusing := stand("billing", "/internal/v1/tenants/acme/subscriptions",
		`{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_limit","detail":"limit too large"}`, http.StatusBadRequest)
	broken := stand("invoice", "/internal/v1/tenants/acme/credit-grants", `{}`, http.StatusInternalServerError)
	g := newFixtureWith(t, map[string]string{"billing": refusing.URL, "invoice": broken.URL})
	page = g.do("GET", "/console/tenants?tenantId=acme", g.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour)), nil)
	if page.status != 200 || !strings.Contains(page.body, `id="usage-count">0<`) ||
		!strings.Contains(page.body, `id="subscriptions-error">Subscriptions could not be read: billing answered 400 invalid_limit: limit too large<`) ||
		!strings.Contains(page.body, `id="credit-grants-error">Credit grants could not be read: service unavailable: invoice /internal/v1/tenants/acme/credit-grants: status 500<`) {
		t.Errorf("tenants page with the services failing: %d %s", page.status, page.body)
	}
	h := newFixture(t)
	page = h.do("GET", "/console/tenants?tenantId=acme", h.signIn(token(t, "alice", auth.RoleOperator, "", time.Hour)), nil)
	if page.status != 200 || !strings.Contains(page.body, "no URL for billing in SERVICE_URLS") ||
		!strings.Contains(page.body, "no URL for invoice in SERVICE_URLS") {
		t.Errorf("tenants page without the services' URLs: %d %s", page.status, page.body)
	}
}
