// Command demo starts the whole system (stack.Start: a throwaway PostgreSQL
// cluster, the embedded Kafka-protocol broker unless KAFKA says otherwise,
// toxiproxy, the five services as processes) and then acts as a client
// would, over HTTP only: it activates prices, sends usage with replays and
// a conflict, adjusts, closes the period, waits for the invoices, and prints
// a report of what the system answered beside what it should have answered
// (computed here from the inputs). Last, it bills a SaaS customer on a plan
// over a later month, moving every service's clock forward through
// CLOCK_OFFSET_FILE (decision 0015). It exits non-zero if any figure
// disagrees, or if any service is left with an outbox backlog, dead
// letters, deferred or quarantined events. `make demo` runs it.
package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
)

func main() {
	// A terminal pipe that closes (| tee, | head on Ctrl-C) must not kill
	// the launcher before it has stopped what it started.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}

func run(ctx context.Context) int {
	began := time.Now()
	// Every service reads its "now" from this clock (decision 0015), which
	// the plan story, last, moves forward.
	clockDir, err := os.MkdirTemp("", "demo-clock-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	defer os.RemoveAll(clockDir)
	clk, err := scenario.NewOffsetClock(filepath.Join(clockDir, "offset"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: the services' clock:", err)
		return 1
	}
	opts, err := stack.FromEnv(stack.Options{Logger: stack.ConsoleLogger(os.Stdout),
		Env:        map[string]string{"CLOCK_OFFSET_FILE": clk.Path},
		ServiceEnv: map[string]map[string]string{"invoice": maps.Clone(scenario.WebhookServiceEnv)}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: start the stack:", err)
		return 1
	}
	stopStack := func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Stop(sctx); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stop the stack:", err)
		}
	}
	startup := time.Since(began)

	progress := func(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
	fmt.Println()
	progress("acting as a client over HTTP: meter %s, usage %s, billing %s, invoice %s, query %s",
		s.URL("meter", 0), s.URL("usage", 0), s.URL("billing", 0), s.URL("invoice", 0), s.URL("query", 0))
	hooks, err := startWebhooks(ctx, s, progress)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: webhooks:", err)
		stopStack()
		return 1
	}
	defer hooks.Close()
	flowBegan := time.Now()
	res, runErr := scenario.Run(ctx, scenario.EndpointsFrom(s.URLs()), scenario.Config{Progress: progress})
	flow := time.Since(flowBegan)
	report(res)

	var failures, unrecovered []string
	if runErr == nil {
		failures, unrecovered = operate(ctx, s, hooks, res, clk, progress)
	} else {
		failures = append(failures, runErr.Error())
	}
	if res != nil {
		failures = append(failures, res.Mismatches...)
	}
	failures = append(failures, unrecovered...)
	conclude(s, failures)
	stopStack()
	fmt.Printf("took %s (stack start %s, client flow %s)\n", since(began), startup.Round(100*time.Millisecond), flow.Round(100*time.Millisecond))
	if len(failures) > 0 {
		return 1
	}
	return 0
}

// operate plays the webhook and operator stories after the client flow,
// then the plan story (last: it moves the services' clock a month or two
// ahead), then waits for every service's backlog to drain; it returns the
// stories' failures, then the services not recovered.
func operate(ctx context.Context, s *stack.Stack, hooks *scenario.WebhookReceiver, res *scenario.Result,
	clk scenario.Clock, progress func(string, ...any)) (failures, unrecovered []string) {
	op := scenario.DevOperator(s.URL("query", 0), "alice@ops.example")
	failures = append(failures, webhookStory(ctx, hooks, res, op, progress)...)
	failures = append(failures, operatorStory(ctx, s, op, res.Sent[0].Tenant, res.Period, progress)...)
	failures = append(failures, planStory(ctx, s, clk, progress)...)
	progress("reading every service's backlog through GET /v1/operator/recovery")
	var recovery map[string]scenario.Recovery
	err := waitFor(ctx, 30*time.Second, progress, "every backlog to drain", func() (bool, error) {
		var err error
		recovery, err = op.RecoveryStatus(ctx)
		for _, r := range recovery {
			if !r.Zero() {
				return false, err
			}
		}
		return err == nil, err
	})
	reportRecovery(recovery)
	if err != nil {
		unrecovered = append(unrecovered, "recovery status: "+err.Error())
	}
	for _, name := range slices.Sorted(maps.Keys(recovery)) {
		if r := recovery[name]; !r.Zero() {
			unrecovered = append(unrecovered, fmt.Sprintf("%s is not recovered: %s", name, r))
		}
	}
	return failures, unrecovered
}

// conclude prints the verdict; on failures it keeps the stack's directory
// (the service logs) and says where.
func conclude(s *stack.Stack, failures []string) {
	fmt.Println()
	if len(failures) == 0 {
		fmt.Println("OK: every figure agrees with what was sent, and every backlog is empty.")
		return
	}
	s.Keep()
	fmt.Printf("FAILED: %d problem(s):\n", len(failures))
	for _, f := range failures {
		fmt.Println("  - " + f)
	}
	fmt.Printf("service logs are kept in %s/logs\n", s.Dir())
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

func section(title string) *tabwriter.Writer {
	fmt.Printf("\n%s\n%s\n", title, strings.Repeat("-", len(title)))
	return tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
}

// check marks a figure that agrees with the expected one, and shows the
// expected one where it does not.
func check(got, want decimal.Decimal) string {
	if got.Equal(want) {
		return got.String() + " ok"
	}
	return fmt.Sprintf("%s WANT %s", got, want)
}

func checkInt(got, want int) string {
	if got == want {
		return fmt.Sprintf("%d ok", got)
	}
	return fmt.Sprintf("%d WANT %d", got, want)
}

func checkMap(got, want map[string]decimal.Decimal) string {
	var parts []string
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	allOK := true
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		g, gok := got[k]
		w, wok := want[k]
		if gok && wok && g.Equal(w) {
			parts = append(parts, k+" "+g.String())
			continue
		}
		allOK = false
		parts = append(parts, fmt.Sprintf("%s %s WANT %s", k, orNone(g, gok), orNone(w, wok)))
	}
	if len(parts) == 0 {
		return "-"
	}
	out := strings.Join(parts, ", ")
	if allOK {
		out += " ok"
	}
	return out
}

func orNone(d decimal.Decimal, ok bool) string {
	if !ok {
		return "none"
	}
	return d.String()
}

func report(res *scenario.Result) {
	if res == nil {
		return
	}
	fmt.Printf("\nREPORT for billing period %s\n", res.Period)

	w := section("Price versions (meter)")
	fmt.Fprintln(w, "tenant\tmeter\tcurrency\tunit price (model)\tversion\teffective at")
	for _, p := range res.Prices {
		price := p.UnitPrice.String()
		if p.Model != "" && p.Model != "unit" {
			price = "(" + p.Model + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", p.Tenant, p.MeterCode, p.Currency, price, p.Version, p.EffectiveAt.UTC().Format(time.RFC3339))
	}
	w.Flush()

	w = section("Usage sent (usage)")
	fmt.Fprintln(w, "tenant\tnew facts (201)\tin batches / alone\treplays (200)\tconflicts (409)\tprice commands replayed")
	for _, s := range res.Sent {
		fmt.Fprintf(w, "%s\t%d\t%d batches / %d alone\t%d\t%d\t%d\n", s.Tenant, s.Facts, s.Batches, s.Singles, s.Replays, s.Conflicts, s.PriceReplays)
	}
	w.Flush()

	w = section("Charges (billing): quantity x unit price, exact")
	fmt.Fprintln(w, "tenant\tcurrency\tcharges\tquantity\tsum")
	for _, c := range res.Charges {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Tenant, c.Currency, checkInt(c.Count, c.WantCount), c.Quantity, check(c.Amount, c.WantAmount))
	}
	w.Flush()

	w = section("Invoices (invoice): one per tenant and currency, one line per meter and price version, rounded once, half-even")
	fmt.Fprintln(w, "tenant\tcurrency\tnumber\tinvoice\tstatus\tlines: charge (charges) / adjustment / rounding\trounding line\tsubtotal\ttotal")
	for _, inv := range res.Invoices {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d (%d) / %d / %d\t%s\t%s\t%s\n", inv.Tenant, inv.Currency, inv.Number,
			short(inv.InvoiceID), inv.Status, inv.Lines["charge"], inv.Charges, inv.Lines["adjustment"], inv.Lines["rounding"], inv.Rounding,
			check(inv.Subtotal, inv.WantSubtotal), check(inv.Total, inv.WantTotal))
	}
	w.Flush()

	if m := res.Models; m != nil {
		w = section("A graduated price (meter, billing's estimate, invoice): 1,000 free, then 0.002 (+1.00), above 10,000 0.001")
		fmt.Fprintln(w, "tenant\tmeter\tfacts\tquantity\testimate (open period)\tinvoice\tgraduated line\ttotal")
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", m.Tenant, m.Meter, m.Facts, m.Quantity, check(m.Estimate, m.WantEstimate),
			m.InvoiceNumber, check(m.Line, m.WantLine), check(m.Total, m.WantTotal))
		w.Flush()
	}

	if c := res.Catalog; c != nil {
		w = section(fmt.Sprintf("An AI API billed from raw events (meter catalog): tenant %s, %s, %d facts of gpt-4 sent as CloudEvents", c.Tenant, c.Currency, c.CloudEvents))
		fmt.Fprintln(w, "meter\taggregation\tprice dimensions\tunit price\tcharges\tquantity\tamount")
		for _, l := range c.Lines {
			dims := l.Dimensions
			if dims == "" {
				dims = "(default)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Meter, l.Aggregation, dims, l.UnitPrice,
				checkInt(int(l.Count), int(l.WantCount)), check(l.Quantity, l.WantQuantity), check(l.Amount, l.WantAmount))
		}
		fmt.Fprintf(w, "total\t\t\t\t\t\t%s\n", check(c.Total, c.WantTotal))
		w.Flush()
		w = section("Usage analytics (query): llm_tokens by day and model, GET .../meters/llm_tokens/usage?windowSize=day&groupBy=model")
		fmt.Fprintln(w, "day (UTC)\tmodel\ttokens")
		got := map[string]decimal.Decimal{}
		for _, row := range c.Usage {
			fmt.Fprintf(w, "%s\t%s\t%s\n", row.From.UTC().Format("2006-01-02"), row.Dimensions["model"], row.Value)
			got[row.Dimensions["model"]] = got[row.Dimensions["model"]].Add(row.Value)
		}
		fmt.Fprintf(w, "by model\t\t%s\n", checkMap(got, c.WantUsage))
		w.Flush()
	}

	w = section("Query summary (query)")
	fmt.Fprintln(w, "tenant\tusage facts\tquantity by meter\tcharged\tadjusted\tinvoiced")
	for _, s := range res.Summary {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Tenant, checkInt(int(s.UsageCount), int(s.WantUsageCount)),
			checkMap(s.Quantity, s.WantQuantity), checkMap(s.Charged, s.WantCharged),
			checkMap(s.Adjusted, s.WantAdjusted), checkMap(s.Invoiced, s.WantInvoiced))
	}
	w.Flush()

	w = section("Timings")
	for _, t := range res.Took {
		fmt.Fprintf(w, "%s\t%s\n", t.Step, t.Took.Round(10*time.Millisecond))
	}
	w.Flush()
}

func reportRecovery(recovery map[string]scenario.Recovery) {
	if recovery == nil {
		return
	}
	w := section("Operator: GET /v1/operator/recovery")
	fmt.Fprintln(w, "service\toutbox pending\tdead letters\tdeferred\tquarantined")
	for _, name := range stack.Services {
		if r, ok := recovery[name]; ok {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", name, r.OutboxPending, r.DeadLetters, r.Deferred, r.Quarantined)
		}
	}
	w.Flush()
}

// short keeps the end of a UUIDv7: its start is a timestamp, the same for
// every invoice of a run.
func short(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-12:]
	}
	return id
}
