package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/pkg/auth"
)

// poisonTenant is the tenant of the recovery story, kept apart from the
// billing flow's tenants so their reconciliation stays about the flow.
const poisonTenant = "umbrella"

// operatorStory is what an operator meets and does when a producer upgrades
// its contract before its consumers: a UsageAccepted at schema version 2
// reaches billing and query, which quarantine it; the operator sees it in
// the quarantine view, rolls out releases that read version 2, redrives it
// (audited), redrives it again (a duplicate), and reconciles. It returns
// the problems found; every step is printed.
func operatorStory(ctx context.Context, s *stack.Stack, op scenario.Operator, flowTenant, period string, progress func(string, ...any)) []string {
	progress("operator story: activating a price for %s, then injecting a UsageAccepted at schema version 2 into usage.events.v1", poisonTenant)
	if err := activatePrice(ctx, s.URL("meter", 0), poisonTenant); err != nil {
		return []string{err.Error()}
	}
	eventID, err := scenario.InjectUsageV2(s.KafkaBrokers(), poisonTenant, "api_calls", "USD", 1, decimal.RequireFromString("100"))
	if err != nil {
		return []string{err.Error()}
	}
	problems, err := showQuarantine(ctx, op, eventID.String(), progress)
	if err != nil {
		return []string{err.Error()}
	}

	progress("operator story: rolling out billing-next and query-next, which read UsageAccepted v2")
	if err := rollOutNext(ctx, s); err != nil {
		return append(problems, err.Error())
	}
	problems = append(problems, redriveTwice(ctx, op, eventID.String())...)
	problems = append(problems, showReconciliation(ctx, op, eventID.String(), flowTenant, period, progress)...)
	fmt.Printf("(%s's mismatches are the injected event, which bypassed the usage service: reconciliation names it.)\n", poisonTenant)
	return problems
}

// showQuarantine waits for billing and query to quarantine eventID, prints
// the quarantine view and returns its problems: each item must be eventID,
// quarantined as unsupported_schema.
func showQuarantine(ctx context.Context, op scenario.Operator, eventID string, progress func(string, ...any)) ([]string, error) {
	var items []scenario.QuarantineItem
	err := waitFor(ctx, 30*time.Second, progress, "billing and query quarantining it", func() (bool, error) {
		var err error
		items, err = op.Quarantine(ctx, poisonTenant)
		return len(items) >= 2, err
	})
	if err != nil {
		return nil, err
	}
	var problems []string
	w := section("Operator: GET /v1/operator/quarantine?tenantId=" + poisonTenant)
	fmt.Fprintln(w, "service\tevent\ttype\treason\tstate")
	for _, it := range items {
		id := "-"
		if it.EventId != nil {
			id = *it.EventId
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", it.Service, short(id), it.EventType, it.Reason, it.State)
		if id != eventID || it.Reason != "unsupported_schema" {
			problems = append(problems, fmt.Sprintf("quarantine lists %s in %s with reason %s, want %s unsupported_schema", id, it.Service, it.Reason, eventID))
		}
	}
	w.Flush()
	return problems, nil
}

// rollOutNext builds billing-next and query-next and upgrades billing and
// query to them.
func rollOutNext(ctx context.Context, s *stack.Stack) error {
	dir := filepath.Join(s.Dir(), "bin-next")
	if err := buildNext(ctx, dir); err != nil {
		return err
	}
	for _, svc := range []string{"billing", "query"} {
		if err := s.Upgrade(ctx, svc, 0, filepath.Join(dir, svc+"-next")); err != nil {
			return err
		}
	}
	return nil
}

// redriveTwice redrives eventID in billing and in query twice, printing
// each redrive; the first must be applied, the second a duplicate, each
// audited as requested by the operator, then completed.
func redriveTwice(ctx context.Context, op scenario.Operator, eventID string) []string {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	w := section("Operator: POST /v1/operator/redrives, then GET /v1/operator/redrives/{id}")
	fmt.Fprintln(w, "service\tredrive\tattempt\toutcome\taudit (state by actor, correlation id)")
	for _, svc := range []string{"billing", "query"} {
		for attempt, want := range []string{"applied", "duplicate"} {
			corr := fmt.Sprintf("demo-fix-%s-%d", svc, attempt+1)
			r, err := op.Redrive(ctx, svc, eventID, "release reads UsageAccepted v2", corr, 30*time.Second)
			if err != nil {
				fail("redrive in %s: %v", svc, err)
				continue
			}
			var audit []string
			for _, a := range r.Audit {
				audit = append(audit, fmt.Sprintf("%s by %s (%s)", a.State, a.Actor, a.CorrelationId))
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", svc, short(r.RedriveId.String()), attempt+1, deref(r.Outcome), strings.Join(audit, " -> "))
			if deref(r.Outcome) != want {
				fail("redrive %d in %s: outcome %s, want %s", attempt+1, svc, deref(r.Outcome), want)
			}
			if len(r.Audit) != 2 || r.Audit[0].State != "requested" || r.Audit[0].Actor != op.Actor ||
				r.Audit[0].CorrelationId != corr || r.Audit[1].State != "completed" {
				fail("redrive %d in %s: audit %s, want requested by %s (%s) -> completed", attempt+1, svc, strings.Join(audit, " -> "), op.Actor, corr)
			}
		}
	}
	w.Flush()
	return problems
}

// showReconciliation prints the reconciliation of the flow's tenant (no
// mismatch) and of the poison tenant (the two mismatches naming eventID)
// and returns its problems.
func showReconciliation(ctx context.Context, op scenario.Operator, eventID, flowTenant, period string, progress func(string, ...any)) []string {
	var problems []string
	w := section("Operator: GET /v1/operator/reconciliation")
	fmt.Fprintln(w, "tenant\tperiod\tusage facts\tcharges\tinvoice lines\tquery usage\tmismatches")
	for _, t := range []string{flowTenant, poisonTenant} {
		var rec scenario.Reconciliation
		err := waitFor(ctx, 30*time.Second, progress, "reconciliation of "+t, func() (bool, error) {
			var err error
			rec, err = op.Reconcile(ctx, t, period)
			if t == poisonTenant {
				return err == nil && rec.Counts.Charges == 1 && len(rec.Mismatches) == 2, err
			}
			return err == nil && len(rec.Mismatches) == 0, err
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("reconciliation of %s: %v", t, err))
		}
		var ms []string
		for _, m := range rec.Mismatches {
			ms = append(ms, m.Kind+" "+short(m.OriginEventId.String()))
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", t, period, rec.Counts.UsageFacts, rec.Counts.Charges,
			rec.Counts.InvoiceLines, rec.Counts.QueryUsage, orDash(strings.Join(ms, ", ")))
		// The injected event never went through the usage service, so its
		// charge and its query projection have no usage fact behind them,
		// and reconciliation says so by id: the check working, not a
		// failure of the story.
		if t == poisonTenant && !namesInjected(rec.Mismatches, eventID) {
			problems = append(problems, fmt.Sprintf("reconciliation of %s: %v, want charge_without_usage and unknown_in_query naming %s", t, rec.Mismatches, eventID))
		}
	}
	w.Flush()
	return problems
}

// namesInjected reports whether ms are exactly the two mismatches an
// event injected around the usage service leaves: its charge rates a usage
// event usage does not hold, and query projects a fact usage does not hold.
func namesInjected(ms []scenario.Mismatch, eventID string) bool {
	if len(ms) != 2 {
		return false
	}
	kinds := map[string]scenario.Mismatch{}
	for _, m := range ms {
		kinds[m.Kind] = m
	}
	return strings.Contains(kinds["charge_without_usage"].Detail, eventID) && kinds["unknown_in_query"].OriginEventId.String() == eventID
}

func activatePrice(ctx context.Context, meterURL, tenant string) error {
	body := `{"meterCode":"api_calls","currency":"USD","unitPrice":"0.002"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, meterURL+"/v1/tenants/"+tenant+"/prices", strings.NewReader(body))
	if err != nil {
		return err
	}
	tok, err := auth.TokenFromEnv("dev-billing-admin", auth.RoleBillingAdmin, tenant)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "demo-price-"+tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("activate a price for %s: %w", tenant, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		raw, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("activate a price for %s: %d %s", tenant, resp.StatusCode, raw)
	}
	return nil
}

func buildNext(ctx context.Context, dir string) error {
	root, err := stack.WorkspaceRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./e2e/cmd/billing-next", "./e2e/cmd/query-next")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the next releases: %w\n%s", err, out)
	}
	return nil
}

func waitFor(ctx context.Context, timeout time.Duration, progress func(string, ...any), what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	last := time.Now()
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
			return fmt.Errorf("waiting for %s: gave up after %v", what, timeout)
		}
		if time.Since(last) > 2*time.Second {
			progress("waiting for %s", what)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func orDash(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
