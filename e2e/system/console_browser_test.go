package system_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// chromium finds the browser. In CI (CI=true) a missing browser fails the
// test; elsewhere it skips it, saying how to install one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH: CI must run the console's browser test (.ci/run installs Debian's chromium)")
	}
	t.Skip("no chromium on PATH: the console's browser test needs it (apt-get install -y chromium)")
	return ""
}

// browser drives one headless chromium tab against the console.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string // the query service's URL
	dir  string // where screenshots go
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1440, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline
		t.Fatalf("start %s: %v", path, err)
	}
	dir, err := os.MkdirTemp("", "console-screenshots-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of the console are saved in %s", dir)
	return &browser{t: t, ctx: ctx, base: base, dir: dir}
}

// step is the deadline of one browser step: generous, for a loaded machine.
const step = 2 * time.Minute

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func run[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// open loads path and waits for the element wait.
func (b *browser) open(path, wait string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(wait)))
}

// submit clicks a form's button, waits for the page it leads to, then for
// the element wait.
func (b *browser) submit(button, wait string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(button)))
	if err != nil {
		b.t.Fatalf("click %s: %v", button, err)
	}
	if resp.Status != http.StatusOK {
		b.t.Fatalf("click %s: the page answered %d", button, resp.Status)
	}
	b.do("wait for "+wait, chromedp.WaitVisible(chromedp.CSS(wait)))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(run(b, "read "+sel, chromedp.Text(chromedp.CSS(sel))))
}

func (b *browser) present(sel string) bool {
	b.t.Helper()
	return run(b, "look for "+sel, chromedp.Evaluate[bool](`document.querySelector(`+strconv.Quote(sel)+`) !== null`))
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := run(b, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// The console in a real browser, on the five services with a real broker
// and databases: no data before sign-in; an operator signs in with a token;
// recovery lists every service; an event billing quarantined (a schema
// version it cannot read) is listed; after billing learns the version, the
// Redrive button with a reason leads to the outcome applied and the audit of
// who asked, why and under which correlation id; the reconciliation page
// shows the counts the operator API reports; the tenant page the summary;
// the dead-letter and webhook pages load; after sign-out there is no data
// again.
func TestConsoleInBrowser(t *testing.T) {
	chromium(t) // before the stack: a skip costs nothing
	s := newStack(t)
	operatorClient := auth.Client(auth.DevToken(auth.RoleOperator, ""))
	beta := auth.Client(auth.DevToken(auth.RoleTenant, "beta"))
	period := events.Period(time.Now())

	// A healthy fact, then a UsageAccepted at schema version 2 that billing
	// and query cannot read yet.
	var price struct{ EffectiveAt time.Time }
	if status, code := call(t, beta, "POST", s.URL("meter")+"/v1/tenants/beta/prices", map[string]string{"Idempotency-Key": "price-beta"},
		map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.01"}, &price); status != http.StatusCreated {
		t.Fatalf("price: %d %s", status, code)
	}
	time.Sleep(time.Until(price.EffectiveAt) + time.Millisecond) // the facts occur once it is in effect
	servicetest.Eventually(t, "a usage fact accepted", time.Minute, func() bool {
		status, code := call(t, beta, "POST", s.URL("usage")+"/v1/tenants/beta/usage", nil, map[string]string{
			"sourceSystem": "crm", "sourceEventId": "b1", "meterCode": "api_calls", "quantity": "1",
			"occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}, nil)
		if status != http.StatusCreated && code != "unknown_meter" && code != "no_price_in_effect" {
			t.Fatalf("usage: %d %s", status, code)
		}
		return status == http.StatusCreated
	})
	v2ID := uuid.Must(uuid.NewV7())
	v2, err := envelope.New(envelope.Meta{EventType: events.TypeUsageAccepted, SchemaVersion: 2, TenantID: "beta",
		AggregateType: events.AggregateUsage, AggregateID: v2ID.String(), AggregateVersion: 1, OccurredAt: time.Now(), Producer: "usage"},
		events.UsageAccepted{UsageID: v2ID, SourceSystem: "crm", SourceEventID: "v2", MeterCode: "api_calls",
			Quantity: decimal.RequireFromString("3"), OccurredAt: time.Now().UTC(), Currency: "USD", PriceVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := v2.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, s.Brokers, events.TopicUsage, kafkatest.Record{Key: v2.PartitionKey, Value: raw})
	servicetest.Eventually(t, "billing's quarantine listed and the fact projected", time.Minute, func() bool {
		var page struct{ Items []struct{ Service string } }
		var sum struct{ Usage struct{ Count int } }
		call(t, operatorClient, "GET", s.URL("query")+"/v1/operator/quarantine?service=billing", nil, nil, &page)
		call(t, beta, "GET", s.URL("query")+"/v1/tenants/beta/summary", nil, nil, &sum)
		return len(page.Items) == 1 && sum.Usage.Count == 1
	})
	// The fix: billing restarts able to read version 2.
	s.Stop("billing")
	fixed := billing.Spec
	fixed.Register = func(r *envelope.Registry) { envelope.Register[events.UsageAccepted](r, events.TypeUsageAccepted, 2) }
	s.Start(fixed)

	b := newBrowser(t, s.URL("query"))

	// No data without a token: the sign-in page.
	b.open("/console/quarantine", "#sign-in")
	if loc := run(b, "location", chromedp.Location()); !strings.HasSuffix(loc, "/console/sign-in") || b.present("#quarantine") {
		t.Fatalf("without a session: at %s", loc)
	}
	b.screenshot("1-sign-in")

	// A tenant's token is refused; an operator's signs in.
	b.do("type a tenant token", chromedp.SendKeys(chromedp.ID("token"), auth.DevToken(auth.RoleTenant, "beta")))
	ctx, cancel := context.WithTimeout(b.ctx, step)
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("sign-in-button"))); err != nil {
		t.Fatal(err)
	}
	cancel()
	if msg := b.text("#message"); !strings.Contains(msg, "not an operator") || b.present("#recovery") {
		t.Fatalf("tenant token: %q", msg)
	}
	tok, err := auth.Token(auth.DevKey, auth.NewClaims("alice@ops.example", auth.RoleOperator, "", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b.do("type an operator token", chromedp.SendKeys(chromedp.ID("token"), tok))
	b.submit("#sign-in-button", "#recovery")
	if actor := b.text("#actor"); actor != "alice@ops.example" {
		t.Errorf("signed in as %q", actor)
	}
	for _, name := range []string{"meter", "usage", "billing", "invoice", "query"} {
		if !b.present(`#recovery tr[data-service="` + name + `"]`) {
			t.Errorf("recovery has no row for %s", name)
		}
	}
	b.screenshot("2-recovery")

	// The quarantined event, filtered by service, with its reason.
	row := `#quarantine tr[data-service="billing"][data-event="` + v2.EventID.String() + `"]`
	b.open("/console/quarantine?service=billing&tenantId=beta", row)
	if reason := b.text(row + " td.reason"); reason != envelope.ReasonUnsupportedSchema {
		t.Errorf("reason %q", reason)
	}
	b.do("type a reason", chromedp.SendKeys(chromedp.CSS(row+` input[name="reason"]`), "billing reads UsageAccepted v2 now"))
	b.screenshot("3-quarantine")

	// Redrive: applied, with the audit.
	b.submit(row+" button", "#redrive")
	redriveURL := run(b, "location", chromedp.Location())
	outcome := b.outcome(redriveURL)
	if outcome != "applied" {
		t.Fatalf("outcome %q, want applied", outcome)
	}
	audit := run(b, "read the audit", chromedp.Evaluate[[][]string](
		`Array.from(document.querySelectorAll('#audit tr')).slice(1).map(r => Array.from(r.cells).map(c => c.textContent.trim()))`))
	if len(audit) != 2 {
		t.Fatalf("audit rows %q", audit)
	}
	req, done := audit[0], audit[1]
	if req[0] != "requested" || req[1] != "alice@ops.example" || !strings.HasPrefix(req[2], "console-") || req[3] != "billing reads UsageAccepted v2 now" {
		t.Errorf("requested row %q", req)
	}
	if done[0] != "completed" || done[1] != "service:billing" || done[2] != req[2] || done[4] != "applied" {
		t.Errorf("completed row %q", done)
	}
	b.screenshot("4-redrive")
	var charges struct {
		Charges []struct{ UsageEventID string }
	}
	if status, _ := call(t, beta, "GET", s.URL("billing")+"/v1/tenants/beta/charges?period="+period, nil, nil, &charges); status != 200 || len(charges.Charges) != 2 {
		t.Errorf("beta's charges after the redrive: %d %+v", status, charges)
	}

	// Reconciliation shows the counts the operator API reports.
	b.open("/console/reconciliation?tenantId=beta&period="+period, "#counts")
	var rep struct{ Counts map[string]int }
	if status, code := call(t, operatorClient, "GET", s.URL("query")+"/v1/operator/reconciliation?tenantId=beta&period="+period, nil, nil, &rep); status != 200 {
		t.Fatalf("reconciliation: %d %s", status, code)
	}
	for id, key := range map[string]string{"#usage-facts": "usageFacts", "#charges": "charges", "#invoice-lines": "invoiceLines", "#query-usage": "queryUsage"} {
		if got := b.text(id); got != itoa(rep.Counts[key]) {
			t.Errorf("%s shows %s, the API %d", id, got, rep.Counts[key])
		}
	}
	if b.text("#charges") != "2" {
		t.Errorf("charges shown %s, want 2", b.text("#charges"))
	}
	b.screenshot("5-reconciliation")

	b.open("/console/tenants?tenantId=beta", "#summary")
	if n := b.text("#usage-count"); n != "1" {
		t.Errorf("beta's usage count %s, want 1", n)
	}
	// Its subscriptions and credit grants (none), read from billing and
	// invoice through their internal routes with query's service token.
	for _, table := range []string{"#subscriptions", "#credit-grants"} {
		if !b.present(table) {
			t.Errorf("%s is not shown (its error note instead: %v)", table, b.present(table+"-error"))
		}
	}
	b.screenshot("6-tenant")

	// The other pages answer from the real services: no dead letter, the
	// invoice service's (empty) webhook intents.
	b.open("/console/dead-letters", "#dead-letters")
	b.open("/console/webhooks", "#intents")
	b.screenshot("7-webhooks")

	// Sign out: no data again.
	b.submit("#sign-out", "#sign-in")
	b.open("/console/quarantine?service=billing", "#sign-in")
	if b.present("#quarantine") {
		t.Error("the quarantine is shown after sign-out")
	}
}

// outcome reloads the redrive page until the service has answered, and
// returns the outcome it shows.
func (b *browser) outcome(url string) string {
	b.t.Helper()
	deadline := time.Now().Add(step)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
		cancel()
		if err == nil && strings.TrimSpace(state) == "completed" {
			return b.text("#outcome")
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the redrive at %s was not completed (state %q, %v)", url, state, err)
		}
		time.Sleep(250 * time.Millisecond) // polled: the page in the browser shows the redrive's state
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
