package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
)

// startWebhooks serves the tenants' webhook endpoint in this process and
// registers it with the invoice service, before any invoice is issued.
func startWebhooks(ctx context.Context, s *stack.Stack, progress func(string, ...any)) (*scenario.WebhookReceiver, error) {
	h, err := scenario.StartWebhooks(ctx, s.URL("invoice", 0), scenario.Config{})
	if err != nil {
		return nil, err
	}
	progress("registered a webhook endpoint per tenant, served by this process; it answers each key's first delivery with a fault in turn: %s, %s, %s, none",
		scenario.FaultDown, scenario.FaultThrottle, scenario.FaultTimeoutApplied)
	return h, nil
}

// webhookStory waits for every invoice to reach its tenant's endpoint,
// prints what the receiver saw and what the operator API says of the
// intents, and returns the problems.
func webhookStory(ctx context.Context, h *scenario.WebhookReceiver, res *scenario.Result, op scenario.Operator, progress func(string, ...any)) []string {
	progress("waiting for every invoice to be told to its tenant's webhook endpoint (signed, redelivered through the faults)")
	rep := h.Wait(ctx, res, op, 2*time.Minute)
	w := section("Webhooks (invoice): each invoice told to its tenant's endpoint, signed, exactly once in effect")
	fmt.Fprintln(w, "tenant\tinvoices\tapplied once\tdeliveries\tduplicates absorbed\tbad signatures")
	for _, t := range rep.Tenants {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%s\n", t.Tenant, t.Invoices, checkInt(t.Effects, t.Invoices), t.Requests,
			t.Duplicates, checkInt(t.BadSig, 0))
	}
	w.Flush()
	var faults []string
	for _, f := range slices.Sorted(maps.Keys(rep.Faults)) {
		faults = append(faults, fmt.Sprintf("%s x%d", f, rep.Faults[f]))
	}
	fmt.Printf("first deliveries answered with: %v\n", faults)
	fmt.Printf("intents (GET /v1/operator/webhook-intents/stats): %d accepted, %d open\n", rep.Accepted, rep.Open)
	return rep.Problems
}
