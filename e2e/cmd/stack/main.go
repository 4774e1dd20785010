// Command stack starts the whole system (see package stack) and leaves it
// running: it prints each service's URL, where the databases, Kafka, the
// proxies and the logs are, and curl commands to try, then waits for
// Ctrl-C, which stops everything. `make up` runs it; the environment
// variables of stack.FromEnv configure it (KAFKA=apache, KAFKA_BROKERS,
// STACK_POSTGRES_URL, STACK_PORT_BASE, STACK_INSTANCES, ...).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/pkg/auth"
)

func main() {
	// A terminal pipe that closes (| tee, | head on Ctrl-C) must not kill
	// the launcher before it has stopped what it started.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts, err := stack.FromEnv(stack.Options{Ports: stack.DefaultPorts(), Logger: stack.ConsoleLogger(os.Stdout),
		// A stack on one machine: webhook endpoints on its loopback, over
		// http, are allowed (a deployment allows only https to public addresses).
		ServiceEnv: map[string]map[string]string{"invoice": {"WEBHOOK_ALLOW_NETS": "127.0.0.0/8,::1/128", "WEBHOOK_ALLOW_HTTP": "true"}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "stack:", err)
		os.Exit(2)
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stack:", err)
		os.Exit(1)
	}
	describe(s)
	<-ctx.Done()
	// A second Ctrl-C kills the launcher at once; its children die with
	// it all the same (parent-death signal, PostgreSQL's guard).
	stop()
	fmt.Println("\n==> stopping (Ctrl-C again to kill at once)")
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "stack:", err)
		os.Exit(1)
	}
}

func describe(s *stack.Stack) {
	fmt.Printf("\nThe stack is up. State, logs and binaries: %s\n\n", s.Dir())
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "service\tURL\tpid\tlog\tdatabase (direct, past the proxy)")
	for _, name := range s.Services() {
		for i := range s.Instances(name) {
			label := name
			if s.Instances(name) > 1 {
				label = fmt.Sprintf("%s.%d", name, i)
			}
			db := ""
			if i == 0 {
				db = s.DatabaseURL(name)
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", label, s.URL(name, i), s.PID(name, i), s.LogFile(name, i), db)
		}
	}
	w.Flush()
	fmt.Printf("\nKafka bootstrap: %s\n", strings.Join(s.KafkaBrokers(), ","))
	fmt.Println("Proxies (toxiproxy, in this process) the services connect through:")
	for _, name := range s.ProxyNames() {
		p := s.Proxy(name)
		fmt.Printf("  %-12s %s -> %s\n", name, p.Addr(), p.Upstream())
	}

	token, err := auth.TokenFromEnv("dev-tenant", auth.RoleTenant, "demo")
	if err != nil {
		fmt.Fprintln(os.Stderr, "stack: make a token:", err)
	}
	u := s.URLs()
	fmt.Printf(`
Try (tenant "demo"; the period is the current month, UTC). The stack accepts tokens signed with
the published development key; this one is for tenant demo (ingest, viewer, billing-admin), valid
an hour, the longest a service accepts (a fresh one: go run ./cmd/token -dev -role tenant -tenant demo):

  TOKEN=%[6]s

  # activate a price (replay it: same answer, header Idempotent-Replayed: true)
  curl -si -H "Authorization: Bearer $TOKEN" -X POST %[1]s/v1/tenants/demo/prices -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: price-demo-1' -d '{"meterCode":"api_calls","currency":"USD","unitPrice":"0.0015"}'
  sleep 1   # usage learns the price from meter's PriceActivated event; usage before it is refused

  # one usage fact, then a batch (send either again: 200, a replay)
  curl -s -H "Authorization: Bearer $TOKEN" -X POST %[2]s/v1/tenants/demo/usage -H 'Content-Type: application/json' \
    -d '{"sourceSystem":"curl","sourceEventId":"ev-1","meterCode":"api_calls","quantity":"1200","occurredAt":"'$(date -u +%%FT%%TZ)'"}'
  curl -s -H "Authorization: Bearer $TOKEN" -X POST %[2]s/v1/tenants/demo/usage:batch -H 'Content-Type: application/json' \
    -d '{"events":[{"sourceSystem":"curl","sourceEventId":"ev-2","meterCode":"api_calls","quantity":"3","occurredAt":"'$(date -u +%%FT%%TZ)'"},{"sourceSystem":"curl","sourceEventId":"ev-3","meterCode":"api_calls","quantity":"0.5","occurredAt":"'$(date -u +%%FT%%TZ)'"}]}'

  # the charges, a credit on the first one, then close the period
  sleep 1   # billing rates each UsageAccepted event into a charge
  curl -s -H "Authorization: Bearer $TOKEN" "%[3]s/v1/tenants/demo/charges?period=$(date -u +%%Y-%%m)"
  CHARGE=$(curl -s -H "Authorization: Bearer $TOKEN" "%[3]s/v1/tenants/demo/charges?period=$(date -u +%%Y-%%m)" | jq -r '.charges[0].chargeId')
  curl -s -H "Authorization: Bearer $TOKEN" -X POST %[3]s/v1/tenants/demo/adjustments -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: adj-demo-1' -d '{"correctionOf":"'$CHARGE'","amount":"-0.25","currency":"USD","reason":"goodwill credit"}'
  curl -s -H "Authorization: Bearer $TOKEN" -X POST %[3]s/v1/tenants/demo/periods/$(date -u +%%Y-%%m)/close -H 'Idempotency-Key: close-demo-1'

  # the invoice and the tenant's summary
  sleep 1   # invoice issues on BillingPeriodClosed
  curl -s -H "Authorization: Bearer $TOKEN" "%[4]s/v1/tenants/demo/invoices?period=$(date -u +%%Y-%%m)"
  curl -s -H "Authorization: Bearer $TOKEN" %[5]s/v1/tenants/demo/summary

  # health, readiness, metrics
  curl -s %[1]s/readyz; curl -s %[1]s/metrics | grep -E '^outbox_(pending|dead_letters|published_total)'

  # something for the operator's views: an event billing and query quarantine (it prints its id)
  go run ./e2e/cmd/quarantine -brokers %[7]s -tenant demo

Ctrl-C stops everything.
`, u["meter"], u["usage"], u["billing"], u["invoice"], u["query"], token, strings.Join(s.KafkaBrokers(), ","))
}
