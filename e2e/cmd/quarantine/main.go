// Command quarantine gives an operator something to act on in a fresh
// `make up`: it publishes, straight to usage.events.v1, a UsageAccepted at
// schema version 2, what a usage release that upgraded its contract ahead
// of its consumers would send. Billing and query, which read version 1
// only, quarantine it as unsupported_schema; the quarantine view lists it
// and a redrive decides it again (quarantined again, until a release that
// reads version 2 runs: make demo plays that story). It prints the event's
// id. A development tool: it writes to the broker, past every service.
//
//	go run ./e2e/cmd/quarantine -brokers 127.0.0.1:PORT -tenant demo
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/scenario"
)

func main() {
	brokers := flag.String("brokers", "", "the Kafka bootstrap address make up printed (host:port, comma-separated)")
	tenant := flag.String("tenant", "demo", "the tenant of the usage fact")
	meter := flag.String("meter", "api_calls", "its meter")
	currency := flag.String("currency", "USD", "its currency")
	quantity := flag.String("quantity", "1", "its quantity")
	flag.Parse()
	q, err := decimal.NewFromString(*quantity)
	if *brokers == "" || err != nil || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "quarantine: give -brokers (the Kafka bootstrap make up printed) and a decimal -quantity")
		flag.Usage()
		os.Exit(2)
	}
	id, err := scenario.InjectUsageV2(strings.Split(*brokers, ","), *tenant, *meter, *currency, 1, q)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quarantine:", err)
		os.Exit(1)
	}
	fmt.Println(id)
}
