// Command compose-demo is the client side of `make compose-demo`: it drives
// the same flow as `make demo` (package scenario: prices, 1,000 usage facts
// over three tenants with replays and a conflict, a credit per tenant, a
// period close) over HTTP against a system that is already running, here
// the containers of deploy/compose.yaml, and checks every figure against
// what it sent. Then, through query's operator API, it waits for every
// service's backlog to drain (GET /v1/operator/recovery) and requires the
// reconciliation of every tenant's period to be empty
// (GET /v1/operator/reconciliation). Last, it runs every query of the
// Grafana dashboard against Prometheus and requires data for each (but the
// Kafka exporter's lag, which the offline profile does not run). It exits
// non-zero on any disagreement.
//
// Its tokens are signed by the environment's signer (containers.Signer: the
// compose issuer's key, deploy/keys/issuer.pem, which `make compose-demo`
// names in AUTH_SIGNING_KEY); it refuses to start with the development key,
// which the containers refuse.
//
// It starts and stops nothing: deploy/offline/compose-demo.sh does that.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/containers"
	"github.com/usagebilling/billing/e2e/scenario"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}

func run(ctx context.Context) int {
	urls := map[string]string{}
	flags := map[string]*string{}
	for i, name := range []string{"meter", "usage", "billing", "invoice", "query"} {
		flags[name] = flag.String(name, fmt.Sprintf("http://127.0.0.1:%d", 8081+i), "base URL of the "+name+" service")
	}
	prom := flag.String("prometheus", "http://127.0.0.1:9090", "base URL of Prometheus, for the dashboard's queries (empty: not checked)")
	dashboard := flag.String("dashboard", "deploy/grafana/dashboards/usage-billing.json", "the Grafana dashboard whose queries are run against Prometheus")
	flag.Parse()
	for name, u := range flags {
		urls[name] = *u
	}
	began := time.Now()
	progress := func(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
	signer, err := containers.Signer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-demo:", err)
		return 2
	}
	progress("signing tokens with %s", signer)
	progress("acting as a client over HTTP: meter %s, usage %s, billing %s, invoice %s, query %s",
		urls["meter"], urls["usage"], urls["billing"], urls["invoice"], urls["query"])

	res, runErr := scenario.Run(ctx, scenario.EndpointsFrom(urls), scenario.Config{Progress: progress})
	var failures []string
	if res != nil {
		report(res)
		failures = append(failures, res.Mismatches...)
	}
	if runErr != nil {
		failures = append(failures, runErr.Error())
	}

	if runErr == nil {
		op := scenario.DevOperator(urls["query"], "compose-demo@ops.example")
		failures = append(failures, checkRecovered(ctx, op, progress)...)
		failures = append(failures, checkReconciled(ctx, op, res)...)
		if *prom != "" {
			failures = append(failures, checkDashboard(ctx, *prom, *dashboard, time.Minute, progress)...)
		}
	}

	fmt.Println()
	if len(failures) > 0 {
		fmt.Printf("FAILED: %d problem(s):\n", len(failures))
		for _, f := range failures {
			fmt.Println("  - " + f)
		}
		return 1
	}
	dash := ", the dashboard has data"
	if *prom == "" {
		dash = " (the dashboard not checked)"
	}
	fmt.Printf("OK: every figure agrees with what was sent, every backlog is empty, every reconciliation is empty%s (client flow %s).\n",
		dash, time.Since(began).Round(100*time.Millisecond))
	return 0
}

// checkRecovered shows every service's backlog (GET /v1/operator/recovery)
// once it is empty, or after a minute; it returns what is not recovered.
func checkRecovered(ctx context.Context, op scenario.Operator, progress func(string, ...any)) []string {
	var failures []string
	progress("reading every service's backlog through GET /v1/operator/recovery")
	recovery, err := waitRecovered(ctx, op, 60*time.Second, progress)
	w := section("Operator: GET /v1/operator/recovery")
	fmt.Fprintln(w, "service\tbacklog")
	for _, name := range slices.Sorted(maps.Keys(recovery)) {
		fmt.Fprintf(w, "%s\t%s\n", name, recovery[name])
		if !recovery[name].Zero() {
			failures = append(failures, fmt.Sprintf("%s is not recovered: %s", name, recovery[name]))
		}
	}
	w.Flush()
	if err != nil {
		failures = append(failures, "recovery status: "+err.Error())
	}
	return failures
}

// checkReconciled shows each tenant's reconciliation of the period
// (GET /v1/operator/reconciliation); it returns every mismatch and every
// count that differs from what was accepted.
func checkReconciled(ctx context.Context, op scenario.Operator, res *scenario.Result) []string {
	var failures []string
	w := section("Operator: GET /v1/operator/reconciliation")
	fmt.Fprintln(w, "tenant\tperiod\tusage facts\tcharges\tinvoice lines\tquery usage\tmismatches")
	for _, s := range res.Sent {
		rec, err := op.Reconcile(ctx, s.Tenant, res.Period)
		if err != nil {
			failures = append(failures, fmt.Sprintf("reconcile %s %s: %v", s.Tenant, res.Period, err))
			continue
		}
		mm := "none"
		if len(rec.Mismatches) > 0 {
			var kinds []string
			for _, m := range rec.Mismatches {
				kinds = append(kinds, m.Kind+" "+m.OriginEventId.String())
			}
			mm = strings.Join(kinds, ", ")
			failures = append(failures, fmt.Sprintf("reconciliation of %s %s: %s", s.Tenant, res.Period, mm))
		}
		if rec.Counts.UsageFacts != s.Facts {
			failures = append(failures, fmt.Sprintf("reconciliation of %s counts %d usage facts, %d were accepted", s.Tenant, rec.Counts.UsageFacts, s.Facts))
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Tenant, res.Period, rec.Counts.UsageFacts, rec.Counts.Charges,
			rec.Counts.InvoiceLines, rec.Counts.QueryUsage, mm)
	}
	w.Flush()
	return failures
}

// waitRecovered polls the recovery status until every service's backlog is
// empty, or wait runs out.
func waitRecovered(ctx context.Context, op scenario.Operator, wait time.Duration, progress func(string, ...any)) (map[string]scenario.Recovery, error) {
	deadline := time.Now().Add(wait)
	for {
		rec, err := op.RecoveryStatus(ctx)
		zero := err == nil
		for _, r := range rec {
			zero = zero && r.Zero()
		}
		if zero || time.Now().After(deadline) || ctx.Err() != nil {
			return rec, err
		}
		progress("waiting for every backlog to drain: %v", rec)
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func section(title string) *tabwriter.Writer {
	fmt.Printf("\n%s\n%s\n", title, strings.Repeat("-", len(title)))
	return tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
}

func mark(ok bool, want string) string {
	if ok {
		return "ok"
	}
	return "WANT " + want
}

// report prints what the system answered beside what was sent.
func report(res *scenario.Result) {
	w := section("Prices (meter)")
	fmt.Fprintln(w, "tenant\tmeter\tcurrency\tunit price\tversion")
	for _, p := range res.Prices {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", p.Tenant, p.MeterCode, p.Currency, p.UnitPrice, p.Version)
	}
	w.Flush()

	w = section("Usage sent (usage)")
	fmt.Fprintln(w, "tenant\tfacts accepted\tbatches\tsingles\treplays (200)\tconflicts (409)")
	for _, s := range res.Sent {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\n", s.Tenant, s.Facts, s.Batches, s.Singles, s.Replays, s.Conflicts)
	}
	w.Flush()

	w = section("Charges (billing)")
	fmt.Fprintln(w, "tenant\tcurrency\tcharges\tamount")
	for _, c := range res.Charges {
		fmt.Fprintf(w, "%s\t%s\t%d %s\t%s %s\n", c.Tenant, c.Currency, c.Count, mark(c.Count == c.WantCount, fmt.Sprint(c.WantCount)),
			c.Amount, mark(c.Amount.Equal(c.WantAmount), c.WantAmount.String()))
	}
	w.Flush()

	w = section("Invoices (invoice)")
	fmt.Fprintln(w, "tenant\tcurrency\tnumber\tstatus\tlines charge/adjustment/rounding\tsubtotal\ttotal")
	for _, inv := range res.Invoices {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d/%d/%d\t%s %s\t%s %s\n", inv.Tenant, inv.Currency, inv.Number, inv.Status,
			inv.Lines["charge"], inv.Lines["adjustment"], inv.Lines["rounding"],
			inv.Subtotal, mark(inv.Subtotal.Equal(inv.WantSubtotal), inv.WantSubtotal.String()),
			inv.Total, mark(inv.Total.Equal(inv.WantTotal), inv.WantTotal.String()))
	}
	w.Flush()

	w = section("Summary (query)")
	fmt.Fprintln(w, "tenant\tusage facts\tcharged\tadjusted\tinvoiced")
	for _, s := range res.Summary {
		fmt.Fprintf(w, "%s\t%d %s\t%s\t%s\t%s\n", s.Tenant, s.UsageCount, mark(s.UsageCount == s.WantUsageCount, fmt.Sprint(s.WantUsageCount)),
			amounts(s.Charged, s.WantCharged), amounts(s.Adjusted, s.WantAdjusted), amounts(s.Invoiced, s.WantInvoiced))
	}
	w.Flush()
}

// amounts prints per-currency amounts, each marked against the expected one.
func amounts(got, want map[string]decimal.Decimal) string {
	var parts []string
	for _, cur := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[cur]
		parts = append(parts, fmt.Sprintf("%s %s %s", cur, g, mark(ok && g.Equal(want[cur]), want[cur].String())))
	}
	for cur, g := range got {
		if _, ok := want[cur]; !ok {
			parts = append(parts, fmt.Sprintf("%s %s WANT none", cur, g))
		}
	}
	return strings.Join(parts, ", ")
}
