package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/auth"
)

// Plans (the catalog's, published by a catalog-admin), a tenant's
// subscriptions to them, and an invoice as a PDF.
func init() {
	register(
		&command{name: "plan publish", args: "[FILE|-]", short: "publish a plan version from a JSON file (or stdin): {code, name, currency, fixedFees, charges, minimumSpend, effectiveAt}", role: auth.RoleCatalogAdmin, flags: planPublish},
		&command{name: "plan list", short: "the catalog's plans, the latest version of each (a viewer of -tenant, or catalog-admin)", role: auth.RoleCatalogAdmin, roleFor: catalogReader, flags: listCommand(listSpec{
			service: "meter", path: "/v1/plans", key: "plans", cols: planColumns,
		})},
		&command{name: "plan versions", args: "CODE", short: "every version of a plan (a viewer of -tenant, or catalog-admin)", role: auth.RoleCatalogAdmin, roleFor: catalogReader, flags: planVersions},
		&command{name: "subscription start", short: "subscribe the tenant to a plan (-plan; -starts-at, default as soon as it may: a plan change ends the current one there)", role: auth.RoleBillingAdmin, flags: subscriptionStart},
		&command{name: "subscription end", args: "SUBSCRIPTION_ID", short: "end a subscription (-ends-at, default as soon as it may)", role: auth.RoleBillingAdmin, flags: subscriptionEnd},
		&command{name: "subscription list", short: "the tenant's subscriptions", role: auth.RoleViewer, flags: listCommand(listSpec{
			service: "billing", path: "subscriptions", key: "subscriptions",
			cols: []column{col("SUBSCRIPTION", "subscriptionId"), col("PLAN", "planCode"), col("STARTS AT", "startsAt"), col("ENDS AT", "endsAt")},
		})},
		&command{name: "invoice pdf", args: "INVOICE_ID", short: "an invoice as a PDF document, into -out FILE", role: auth.RoleViewer, flags: invoicePDF},
	)
}

var planColumns = []column{col("CODE", "code"), col("VERSION", "version"), col("NAME", "name"), col("CURRENCY", "currency"),
	col("MINIMUM SPEND", "minimumSpend"), col("EFFECTIVE AT", "effectiveAt")}

func planPublish(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	return func(ctx context.Context, c *Client, args []string) error {
		if len(args) > 1 {
			return usagef("give at most one FILE (or - for stdin)")
		}
		in, name, done, err := c.input(args)
		if err != nil {
			return err
		}
		defer done()
		if in == nil {
			return usagef("no input: give a file")
		}
		// The document is checked against the contract here, so a typo
		// is told before anything is sent.
		dec := json.NewDecoder(io.LimitReader(in, 1<<20))
		dec.DisallowUnknownFields()
		var req meterapi.PublishPlanRequest
		if err := dec.Decode(&req); err != nil {
			return usagef("%s: not a plan document: %v", name, err)
		}
		return c.command(ctx, call{service: "meter", method: http.MethodPost, path: "/v1/plans", body: req}, *key,
			"planId", "code", "version", "name", "currency", "minimumSpend", "effectiveAt", "eventId")
	}
}

func planVersions(fs *flag.FlagSet) runFunc {
	var p paging
	p.register(fs)
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "CODE"); err != nil {
			return err
		}
		items, next, err := c.list(ctx, call{service: "meter", method: http.MethodGet, path: "/v1/plans/" + args[0] + "/versions"}, "versions", p)
		if err != nil {
			return err
		}
		return c.printList("versions", items, next, planColumns...)
	}
}

func subscriptionStart(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	plan := fs.String("plan", "", "the plan's code (required)")
	startsAt := fs.String("starts-at", "", "RFC 3339 time it starts (default: as soon as it may; never in the past)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		if *plan == "" {
			return usagef("-plan is required")
		}
		req := billingapi.SubscribeRequest{PlanCode: *plan}
		if *startsAt != "" {
			at, err := timeArg("starts-at", *startsAt)
			if err != nil {
				return err
			}
			req.StartsAt = at
		}
		return c.command(ctx, call{service: "billing", method: http.MethodPost, path: c.tenantPath("subscriptions"), body: req}, *key,
			"subscriptionId", "planCode", "startsAt", "endsAt")
	}
}

func subscriptionEnd(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	endsAt := fs.String("ends-at", "", "RFC 3339 time it ends (default: as soon as it may; never in the past)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "SUBSCRIPTION_ID"); err != nil {
			return err
		}
		var req billingapi.EndSubscriptionRequest
		if *endsAt != "" {
			at, err := timeArg("ends-at", *endsAt)
			if err != nil {
				return err
			}
			req.EndsAt = at
		}
		return c.command(ctx, call{service: "billing", method: http.MethodPost, path: c.tenantPath("subscriptions", args[0], "end"), body: req}, *key,
			"subscriptionId", "planCode", "startsAt", "endsAt")
	}
}

func invoicePDF(fs *flag.FlagSet) runFunc {
	out := fs.String("out", "", "the file to write the PDF to (required; - for stdout)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "INVOICE_ID"); err != nil {
			return err
		}
		if *out == "" {
			return usagef("-out FILE is required (- for stdout)")
		}
		resp, err := c.do(ctx, call{service: "invoice", method: http.MethodGet, path: c.tenantPath("invoices", args[0]),
			header: map[string]string{"Accept": "application/pdf, application/problem+json"}})
		if err != nil {
			return err
		}
		if *out == "-" {
			_, err := c.out.Write(resp.body)
			return err
		}
		if err := os.WriteFile(*out, resp.body, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(c.err, "%s: %d bytes\n", *out, len(resp.body))
		return nil
	}
}

// input is a command's input: the file args names (at most one), or stdin
// for none or "-"; done closes it.
func (c *Client) input(args []string) (in io.Reader, name string, done func(), err error) {
	if len(args) == 0 || args[0] == "-" {
		return c.in, "stdin", func() {}, nil
	}
	f, err := os.Open(args[0])
	if err != nil {
		return nil, "", nil, usageError{err.Error()}
	}
	return f, args[0], func() { f.Close() }, nil
}

// timeArg parses an RFC 3339 time flag.
func timeArg(name, v string) (*time.Time, error) {
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, usagef("-%s: want an RFC 3339 time such as 2026-12-01T00:00:00Z, got %q", name, v)
	}
	return &at, nil
}
