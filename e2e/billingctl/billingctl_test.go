package billingctl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/cmd/billingctl/cli"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
	"github.com/usagebilling/billing/pkg/auth"
)

// TestBillingctl runs the command line against the five services started by
// e2e/stack (a throwaway PostgreSQL, the embedded Kafka-protocol broker):
// the README's walk-throughs, a tenant's flow, the meter catalog's, an
// operator's, and bad input.
func TestBillingctl(t *testing.T) {
	s := stacktest.Start(t, stack.Options{PostgresFast: true,
		Env: map[string]string{"CONSUMER_SWEEP_INTERVAL": "500ms"}})
	env := map[string]string{"BILLINGCTL_DEV": "true", "BILLINGCTL_SUBJECT": "alice"}
	for name, u := range s.URLs() {
		env["BILLINGCTL_"+strings.ToUpper(name)+"_URL"] = u
	}
	c := &ctl{t: t, env: env}

	t.Run("readme", func(t *testing.T) { readme(t, s) })
	t.Run("tenant", func(t *testing.T) { tenantFlow(t, c.with(t)) })
	t.Run("catalog", func(t *testing.T) { catalogFlow(t, c.with(t)) })
	t.Run("operator", func(t *testing.T) { operatorFlow(t, c.with(t), s) })
	t.Run("bad input", func(t *testing.T) { badInput(t, c.with(t)) })
	t.Run("binary", func(t *testing.T) { binary(t, env) })
	t.Run("retry", func(t *testing.T) { retry(t, c.with(t), s) })
}

// signal is an output that tells once a line holding want was written.
type signal struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signal) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *signal) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// retry sends usage while the usage service is down: billingctl retries the
// batch until usage is back, and every fact is taken once.
func retry(t *testing.T, c *ctl, s *stack.Stack) {
	tenant := fmt.Sprintf("cli-retry-%d", time.Now().UnixNano())
	c.ok("-tenant", tenant, "price", "activate", "-meter", "api_calls", "-currency", "USD", "-unit-price", "1")
	at := time.Now().UTC().Add(time.Millisecond).Format(time.RFC3339Nano)
	probe := fmt.Sprintf(`{"sourceEventId":"p","meterCode":"api_calls","quantity":"1","occurredAt":%q}`+"\n", at)
	eventually(t, "usage knowing the meter", func() error {
		if r := c.run(probe, "-tenant", tenant, "usage", "send"); r.code != 0 {
			return fmt.Errorf("exit %d: %s%s", r.code, r.out, r.errOut)
		}
		return nil
	})
	var in strings.Builder
	for i := range 50 {
		fmt.Fprintf(&in, `{"sourceEventId":"r-%d","meterCode":"api_calls","quantity":"1","occurredAt":%q}`+"\n", i, at)
	}
	if err := s.Kill("usage", 0); err != nil {
		t.Fatal(err)
	}
	errOut := &signal{want: "retrying in", seen: make(chan struct{})}
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(t.Context(), []string{"-tenant", tenant, "usage", "send", "-retries", "10", "-batch", "20", "-o", "json"},
			cli.IO{In: strings.NewReader(in.String()), Out: &out, Err: errOut, Getenv: func(k string) string { return c.env[k] }})
	}()
	select {
	case <-errOut.seen: // the first batch failed and waits to be sent again
	case code := <-done:
		t.Fatalf("usage send with usage down: exit %d before any retry\n%s", code, errOut)
	}
	if err := s.Restart(t.Context(), "usage", 0); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("usage send across a restart of usage: exit %d\n%s%s", code, out.String(), errOut)
	}
	var sent cli.SendSummary
	if err := json.Unmarshal(out.Bytes(), &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Accepted != 50 || sent.Replayed != 0 || sent.Refused != 0 || sent.Retries < 1 || sent.Batches != 3 {
		t.Fatalf("usage send across a restart: %+v, want 50 accepted in 3 batches after at least one retry", sent)
	}
}

// ctl runs cli.Main in this process.
type ctl struct {
	t   *testing.T
	env map[string]string
}

func (c *ctl) with(t *testing.T) *ctl { return &ctl{t: t, env: c.env} }

// result is one run: its exit code and outputs.
type result struct {
	code        int
	out, errOut string
}

func (c *ctl) run(stdin string, args ...string) result {
	c.t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(c.t.Context(), args, cli.IO{In: strings.NewReader(stdin), Out: &out, Err: &errOut,
		Getenv: func(k string) string { return c.env[k] }})
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// ok runs args, fails the test unless they exit 0, and returns the output.
func (c *ctl) ok(args ...string) string {
	c.t.Helper()
	r := c.run("", args...)
	if r.code != 0 {
		c.t.Fatalf("billingctl %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.errOut)
	}
	return r.out
}

// json runs args with -o json and decodes the output.
func (c *ctl) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("billingctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// eventually retries check until it returns nil or the deadline passes
// (the services converge asynchronously, through Kafka).
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		// Polled: the services converge through Kafka and tell the client nothing.
		time.Sleep(200 * time.Millisecond)
	}
}

func tenantFlow(t *testing.T, c *ctl) {
	tenant := fmt.Sprintf("cli-%d", time.Now().UnixNano())
	period := time.Now().UTC().Format("2006-01")
	tn := []string{"-tenant", tenant}

	out := c.ok(append(tn, "price", "activate", "-meter", "api_calls", "-currency", "USD", "-unit-price", "0.002")...)
	if !strings.Contains(out, "api_calls") || !strings.Contains(out, "0.002") {
		t.Fatalf("price activate printed:\n%s", out)
	}
	// Graduated: the first 100 at 0.01, the rest at 0.005.
	c.ok(append(tn, "price", "activate", "-meter", "storage_gb", "-currency", "USD", "-model", "graduated",
		"-tier", "100:0.01", "-tier", "inf:0.005")...)
	var prices struct {
		Prices []struct {
			EffectiveAt time.Time `json:"effectiveAt"`
		}
	}
	c.json(&prices, append(tn, "price", "list", "-all")...)
	if len(prices.Prices) != 2 {
		t.Fatalf("price list: %d prices, want 2: %v", len(prices.Prices), prices.Prices)
	}
	// The facts occur after both prices take effect (right after the
	// tenant's published schedule, decision 0019), and are sent from then.
	effective := time.Now().UTC()
	for _, p := range prices.Prices {
		if p.EffectiveAt.After(effective) {
			effective = p.EffectiveAt
		}
	}
	// Deliberate: the facts must occur once the prices are in effect, a wall-clock time.
	time.Sleep(time.Until(effective) + time.Millisecond)
	at := effective.Add(time.Millisecond).Format(time.RFC3339Nano)

	// 1,200 api_calls facts of 1 (3 batches of 500) and one storage_gb
	// fact of 150, from a CSV file.
	var csv strings.Builder
	csv.WriteString("sourceEventId,meterCode,quantity,occurredAt\n")
	for i := range 1200 {
		fmt.Fprintf(&csv, "e-%d,api_calls,1,%s\n", i, at)
	}
	fmt.Fprintf(&csv, "s-1,storage_gb,150,%s\n", at)
	dir := t.TempDir()
	file := filepath.Join(dir, "usage.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Usage learns the meters from meter's events: until then it answers
	// unknown_meter. Two of the file's facts, in NDJSON on stdin, until
	// both are taken.
	probe := fmt.Sprintf(`{"sourceEventId":"e-0","meterCode":"api_calls","quantity":"1","occurredAt":%q}
{"sourceEventId":"s-1","meterCode":"storage_gb","quantity":"150","occurredAt":%q}
`, at, at)
	eventually(t, "usage knowing the meters", func() error {
		if r := c.run(probe, append(tn, "usage", "send", "-")...); r.code != 0 {
			return fmt.Errorf("exit %d: %s%s", r.code, r.out, r.errOut)
		}
		return nil
	})
	var sent cli.SendSummary
	c.json(&sent, append(tn, "usage", "send", file)...)
	if sent.Events != 1201 || sent.Accepted != 1199 || sent.Replayed != 2 || sent.Refused != 0 || sent.Batches != 3 {
		t.Fatalf("usage send: %+v, want 1199 accepted and the 2 sent before replayed, in 3 batches", sent)
	}
	// The same file again: every event a replay, nothing counted twice.
	out = c.ok(append(tn, "usage", "send", "-batch", "1000", file)...)
	if !strings.Contains(out, "1201 events in 2 batches") || !strings.Contains(out, "0 accepted, 1201 replayed, 0 refused") {
		t.Fatalf("usage send again printed:\n%s", out)
	}

	// 1200 x 0.002 + 100 x 0.01 + 50 x 0.005 = 2.4 + 1 + 0.25 = 3.65
	want := decimal.RequireFromString("3.65")
	eventually(t, "the period estimate", func() error {
		var p struct {
			Status   string
			Estimate map[string]string
		}
		c.json(&p, append(tn, "period", "show", period)...)
		if got, err := decimal.NewFromString(p.Estimate["USD"]); err != nil || !got.Equal(want) || p.Status != "open" {
			return fmt.Errorf("period %s: status %s, estimate %v; want open, USD %s", period, p.Status, p.Estimate, want)
		}
		return nil
	})
	out = c.ok(append(tn, "period", "show", period)...)
	if !strings.Contains(out, "USD=3.65") {
		t.Fatalf("period show printed:\n%s", out)
	}
	var charges struct {
		Charges []map[string]any
		Next    string
	}
	c.json(&charges, append(tn, "charges", "-period", period, "-limit", "1001")...)
	if len(charges.Charges) != 1001 || charges.Next == "" {
		t.Fatalf("charges -limit 1001: %d charges, next %q; want 1001 and a next cursor", len(charges.Charges), charges.Next)
	}
	charges.Next = "" // absent from the next answer
	c.json(&charges, append(tn, "charges", "-period", period, "-all")...)
	if len(charges.Charges) != 1201 || charges.Next != "" {
		t.Fatalf("charges -all: %d charges, next %q; want 1201 and no next", len(charges.Charges), charges.Next)
	}

	// A credit of 0.05 on one charge: the invoice's total is 3.60.
	credit := []string{"adjust", "-correction-of", charges.Charges[0]["chargeId"].(string), "-amount", "-0.05", "-currency", "USD", "-reason", "goodwill"}
	var adj map[string]any
	c.json(&adj, append(tn, credit...)...)
	if adj["adjustmentId"] == nil || adj["period"] != period {
		t.Fatalf("adjust: %v", adj)
	}
	if r := c.run("", append(tn, credit...)...); r.code != 0 || !strings.Contains(r.errOut, "replayed") {
		t.Fatalf("adjust again: exit %d, want 0 and a replay told\n%s%s", r.code, r.out, r.errOut)
	}
	want = decimal.RequireFromString("3.60")
	// A prepaid credit of 1.00: the issued invoice draws it, 2.60 due.
	var grant map[string]any
	c.json(&grant, append(tn, "credit", "grant", "-currency", "USD", "-amount", "1.00", "-reason", "prepaid")...)
	if grant["grantId"] == nil || grant["balance"] != "1" || grant["status"] != "active" {
		t.Fatalf("credit grant: %v", grant)
	}

	out = c.ok(append(tn, "period", "close", period)...)
	if !strings.Contains(out, period) {
		t.Fatalf("period close printed:\n%s", out)
	}
	// Again: the same Idempotency-Key (derived from the request), no
	// second close.
	c.ok(append(tn, "period", "close", period)...)

	var invoices struct{ Invoices []map[string]any }
	eventually(t, "the issued invoice", func() error {
		c.json(&invoices, append(tn, "invoice", "list", "-period", period)...)
		if len(invoices.Invoices) != 1 || invoices.Invoices[0]["status"] != "issued" {
			return fmt.Errorf("invoices %v, want one issued; the period: %s", invoices.Invoices, c.ok(append(tn, "period", "show", period, "-o", "json")...))
		}
		return nil
	})
	inv := invoices.Invoices[0]
	if total := decimal.RequireFromString(inv["total"].(string)); !total.Equal(want) || inv["creditsApplied"] != "-1" || inv["amountDue"] != "2.6" {
		t.Fatalf("invoice total %s, credits %v, due %v; want %s, -1, 2.6", total, inv["creditsApplied"], inv["amountDue"], want)
	}
	var grants struct{ Grants []map[string]any }
	c.json(&grants, append(tn, "credit", "list")...)
	if len(grants.Grants) != 1 || grants.Grants[0]["balance"] != "0" || grants.Grants[0]["status"] != "used" {
		t.Fatalf("credit list after the close: %v, want the grant used", grants.Grants)
	}
	id := inv["invoiceId"].(string)
	var lines struct {
		Lines []map[string]any
		Next  string
	}
	c.json(&lines, append(tn, "invoice", "lines", id, "-all")...)
	sum := decimal.Zero
	meters := map[string]string{}
	credited := ""
	for _, l := range lines.Lines {
		if l["kind"] == "credit_applied" { // after the total
			continue
		}
		sum = sum.Add(decimal.RequireFromString(l["amount"].(string)))
		switch l["kind"] {
		case "charge":
			meters[l["meterCode"].(string)] = l["quantity"].(string)
		case "adjustment":
			credited = l["amount"].(string)
		}
	}
	if !sum.Equal(want) || meters["api_calls"] != "1200" || meters["storage_gb"] != "150" || credited != "-0.05" {
		t.Fatalf("invoice lines sum to %s with quantities %v and credit %q; want %s, api_calls 1200, storage_gb 150, -0.05: %v",
			sum, meters, credited, want, lines.Lines)
	}
	lines.Next = ""
	c.json(&lines, append(tn, "invoice", "lines", id, "-limit", "1")...)
	if len(lines.Lines) != 1 || lines.Next != "1" {
		t.Fatalf("invoice lines -limit 1: %d lines, next %q", len(lines.Lines), lines.Next)
	}
	out = c.ok(append(tn, "invoice", "lines", id)...)
	if !strings.Contains(out, "KIND") || !strings.Contains(out, "api_calls") || !strings.Contains(out, "2.4") {
		t.Fatalf("invoice lines printed:\n%s", out)
	}
	out = c.ok(append(tn, "invoice", "show", id)...)
	if !strings.Contains(out, "issued") || !strings.Contains(out, "3.6") {
		t.Fatalf("invoice show printed:\n%s", out)
	}
	pdf := filepath.Join(t.TempDir(), "invoice.pdf")
	c.ok(append(tn, "invoice", "pdf", id, "-out", pdf)...)
	if b, err := os.ReadFile(pdf); err != nil || !bytes.HasPrefix(b, []byte("%PDF-")) {
		t.Fatalf("invoice pdf wrote no PDF (%v)", err)
	}
}

func operatorFlow(t *testing.T, c *ctl, s *stack.Stack) {
	tenant := fmt.Sprintf("cli-op-%d", time.Now().UnixNano())
	c.ok("-tenant", tenant, "price", "activate", "-meter", "api_calls", "-currency", "USD", "-unit-price", "0.002")
	// A UsageAccepted at schema version 2, which today's billing and query
	// do not read: both quarantine it. Sent by the command docs/operating.md
	// gives a user of make up for it.
	root, err := stack.WorkspaceRoot()
	if err != nil {
		t.Fatal(err)
	}
	inject := exec.CommandContext(t.Context(), "go", "run", "./e2e/cmd/quarantine", "-brokers", strings.Join(s.KafkaBrokers(), ","),
		"-tenant", tenant, "-quantity", "100")
	inject.Dir = root
	var stderr bytes.Buffer
	inject.Stderr = &stderr
	printed, err := inject.Output()
	if err != nil {
		t.Fatalf("go run ./e2e/cmd/quarantine: %v\n%s", err, stderr.String())
	}
	eventID, err := uuid.Parse(strings.TrimSpace(string(printed)))
	if err != nil {
		t.Fatalf("go run ./e2e/cmd/quarantine printed %q, want an event id", printed)
	}
	var q struct{ Items []map[string]any }
	eventually(t, "the quarantined event", func() error {
		c.json(&q, "quarantine", "-tenant-id", tenant, "-service", "billing")
		if len(q.Items) != 1 {
			return fmt.Errorf("quarantine of %s in billing: %v, want one item", tenant, q.Items)
		}
		return nil
	})
	if it := q.Items[0]; it["eventId"] != eventID.String() || it["reason"] != "unsupported_schema" || it["state"] != "quarantined" {
		t.Fatalf("quarantined %v, want event %s, unsupported_schema, quarantined", it, eventID)
	}
	out := c.ok("quarantine", "-tenant-id", tenant, "-reason", "unsupported_schema")
	if !strings.Contains(out, eventID.String()) || !strings.Contains(out, "REASON") {
		t.Fatalf("quarantine printed:\n%s", out)
	}
	out = c.ok("recovery")
	if !strings.Contains(out, "QUARANTINED") || !strings.Contains(out, "billing") {
		t.Fatalf("recovery printed:\n%s", out)
	}

	var rd struct {
		RedriveID string
		State     string
		Outcome   *string
		Audit     []struct{ State, Actor, CorrelationID, Reason string }
	}
	const reason = "checking the v2 reader"
	c.json(&rd, "redrive", "-service", "billing", "-event", eventID.String(), "-reason", reason, "-correlation-id", "cli-test-1")
	if rd.State != "completed" || rd.Outcome == nil || len(rd.Audit) != 2 {
		t.Fatalf("redrive: %+v, want completed with an outcome and two audit rows", rd)
	}
	if a := rd.Audit[0]; a.State != "requested" || a.Actor != "alice" || a.CorrelationID != "cli-test-1" || a.Reason != reason {
		t.Fatalf("audit %+v, want requested by alice, cli-test-1, %q", a, reason)
	}
	// A typo: billing holds no such event. Refused at once, exit 1,
	// nothing audited.
	for _, args := range [][]string{{"redrive", "-service", "billing"}, {"dead-letters", "release", "-service", "billing"}} {
		r := c.run("", append(args, "-event", "01a23ced-0000-7000-8000-000000000000", "-reason", "typo")...)
		if r.code != cli.ExitRefused || !strings.Contains(r.errOut, "404 Not Found (code event_not_found)") {
			t.Fatalf("%s of an unknown event: exit %d, want %d and event_not_found\n%s%s", strings.Join(args, " "), r.code, cli.ExitRefused, r.out, r.errOut)
		}
	}
	out = c.ok("audit", rd.RedriveID)
	for _, want := range []string{"requested", "completed", "alice", "cli-test-1", reason, *rd.Outcome} {
		if !strings.Contains(out, want) {
			t.Fatalf("audit printed no %q:\n%s", want, out)
		}
	}
	out = c.ok("dead-letters", "list", "-all")
	if !strings.Contains(out, "SERVICE") {
		t.Fatalf("dead-letters list printed:\n%s", out)
	}
	var rec struct {
		Counts     map[string]int
		Mismatches []map[string]any
	}
	c.json(&rec, "reconcile", "-tenant-id", tenant, "-period", time.Now().UTC().Format("2006-01"))
	if rec.Counts == nil {
		t.Fatalf("reconcile: no counts")
	}
}

func badInput(t *testing.T, c *ctl) {
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"unknown flag", []string{"recovery", "-frobnicate"}, cli.ExitUsage, "flag provided but not defined: -frobnicate"},
		{"unknown command", []string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"missing argument", []string{"-tenant", "acme", "invoice", "show"}, cli.ExitUsage, "want INVOICE_ID"},
		{"no tenant", []string{"summary"}, cli.ExitUsage, "needs -tenant"},
		{"bad output", []string{"recovery", "-o", "yaml"}, cli.ExitUsage, "-o must be table or json"},
		{"not a decimal", []string{"-tenant", "acme", "price", "activate", "-meter", "m", "-currency", "USD", "-unit-price", "abc"},
			cli.ExitUsage, `-unit-price "abc" is not a decimal number`},
		{"refused: tiers not ascending", []string{"-tenant", "acme", "price", "activate", "-meter", "m", "-currency", "USD", "-model", "graduated",
			"-tier", "100:0.01", "-tier", "50:0.02", "-tier", "inf:0.01"}, cli.ExitRefused, "refused: 400 Bad Request (code tiers_not_ascending)"},
		{"refused: invalid period", []string{"-tenant", "acme", "period", "show", "2024-13"},
			cli.ExitRefused, "(code invalid_period)"},
		{"refused: tenant token on the operator API", []string{"recovery", "-token", auth.DevToken(auth.RoleTenant, "acme")},
			cli.ExitRefused, "403 Forbidden (code forbidden)"},
		{"refused: forged token", []string{"recovery", "-token", "not-a-token"}, cli.ExitRefused, "401 Unauthorized"},
		{"unreachable", []string{"recovery", "-query-url", "http://127.0.0.1:1"}, cli.ExitUnavailable, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.run("", tc.args...)
			if r.code != tc.code || !strings.Contains(r.errOut, tc.contains) {
				t.Fatalf("exit %d, want %d; stderr should hold %q:\n%s%s", r.code, tc.code, tc.contains, r.out, r.errOut)
			}
		})
	}

	// Events refused one by one: the others are taken, the refused listed
	// by line and code, exit 4.
	tenant := fmt.Sprintf("cli-bad-%d", time.Now().UnixNano())
	c.ok("-tenant", tenant, "price", "activate", "-meter", "api_calls", "-currency", "USD", "-unit-price", "1")
	at := time.Now().UTC().Add(time.Millisecond).Format(time.RFC3339Nano)
	first := fmt.Sprintf(`{"sourceEventId":"a","meterCode":"api_calls","quantity":"2","occurredAt":%q}`+"\n", at)
	eventually(t, "usage knowing the meter", func() error {
		if r := c.run(first, "-tenant", tenant, "usage", "send"); r.code != 0 {
			return fmt.Errorf("exit %d: %s%s", r.code, r.out, r.errOut)
		}
		return nil
	})
	nd := first + fmt.Sprintf(`{"sourceEventId":"b","meterCode":"never_defined","quantity":"1","occurredAt":%q}
{"sourceEventId":"c","meterCode":"api_calls","quantity":"-1","occurredAt":%q}
`, at, at)
	r := c.run(nd, "-tenant", tenant, "usage", "send", "-format", "ndjson", "-")
	if r.code != cli.ExitSomeRefused || !strings.Contains(r.out, "0 accepted, 1 replayed, 2 refused") ||
		!strings.Contains(r.out, "unknown_meter") || !strings.Contains(r.out, "invalid_quantity") || !strings.Contains(r.errOut, "2 of 3 events refused") {
		t.Fatalf("usage send with refused events: exit %d, want %d\n%s%s", r.code, cli.ExitSomeRefused, r.out, r.errOut)
	}
	// Input that cannot be read, or has no time for a fact, changes
	// nothing: exit 2 before any request.
	for _, in := range []string{"meterCode,quantity,occurredAt\n\"unterminated\n", "meterCode,quantity\napi_calls,1\n",
		"meterCode,quantity,occurredAt\napi_calls,one," + at + "\n", "meterCode,quantity,occurredAt\napi_calls,1,yesterday\n"} {
		r = c.run(in, "-tenant", tenant, "usage", "send", "-format", "csv")
		if r.code != cli.ExitUsage {
			t.Fatalf("usage send of %q: exit %d, want %d\n%s%s", in, r.code, cli.ExitUsage, r.out, r.errOut)
		}
	}
	var sum struct{ Usage struct{ Count int } }
	eventually(t, "the summary", func() error {
		c.json(&sum, "-tenant", tenant, "summary")
		if sum.Usage.Count != 1 {
			return fmt.Errorf("summary counts %d usage facts, want 1", sum.Usage.Count)
		}
		return nil
	})
}

// binary builds cmd/billingctl and checks the exit codes the shell sees.
func binary(t *testing.T, env map[string]string) {
	root, err := stack.WorkspaceRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "billingctl")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/billingctl")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build billingctl: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"recovery"}, 0, "SERVICE"},
		{[]string{"recovery", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"-tenant", "acme", "period", "show", "nope"}, 1, "code invalid_period"},
	} {
		cmd := exec.CommandContext(t.Context(), bin, tc.args...)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(out.String(), tc.contains) {
			t.Fatalf("billingctl %s: exit %d, want %d with %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.contains, out.String())
		}
	}
}
