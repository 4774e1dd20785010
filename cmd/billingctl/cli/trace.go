package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/usagebilling/billing/pkg/auth"
)

// A tenant traces its own invoice (query's trace routes, role viewer).
func init() {
	register(
		&command{name: "invoice explain", args: "INVOICE_ID", short: "an invoice traced: each line -> its charges -> the usage fact of each (source event id, properties)", role: auth.RoleViewer, flags: invoiceExplain},
		&command{name: "late-usage", short: "the facts billed late into a period (-period), with the period each occurred in", role: auth.RoleViewer, flags: listCommand(listSpec{
			service: "query", path: "late-usage", key: "charges",
			filters: []filter{{"period", "period", "the billed period, YYYY-MM (required)"}},
			cols: []column{col("OCCURRED IN", "occurrencePeriod"), col("BILLED IN", "billedPeriod"), col("METER", "meterCode"),
				col("QUANTITY", "quantity"), col("AMOUNT", "amount"), col("OCCURRED AT", "occurredAt"),
				col("SOURCE", "fact.sourceSystem"), col("SOURCE EVENT", "fact.sourceEventId"), col("CHARGE", "chargeId")},
		})},
		&command{name: "period reconcile", args: "PERIOD", short: "reconcile the tenant's period: usage facts, charges, invoice lines and query compared by origin event", role: auth.RoleViewer, flags: periodReconcile},
	)
}

// invoiceExplain prints an invoice's lines, and under each charge or
// unpriced line its charges with the usage fact each rates, -limit charges
// a line (-all for every one).
func invoiceExplain(fs *flag.FlagSet) runFunc {
	var p paging
	fs.IntVar(&p.limit, "limit", 100, "show at most this many charges of each line, following pages as needed")
	fs.BoolVar(&p.all, "all", false, "every charge of each line")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "INVOICE_ID"); err != nil {
			return err
		}
		inv, err := c.invoice(ctx, args[0])
		if err != nil {
			return err
		}
		period, currency := text(inv["period"]), text(inv["currency"])
		lines := maps(inv["lines"])
		type traced struct {
			charges []map[string]any
			next    string
		}
		trace := make([]traced, len(lines))
		for i, l := range lines {
			kind := text(l["kind"])
			if kind != "charge" && kind != "unpriced" {
				continue
			}
			q := url.Values{"lineId": {text(l["lineId"])}, "currency": {currency}}
			k := call{service: "query", method: http.MethodGet, path: c.tenantPath("periods", period, "charge-facts"), query: q}
			if trace[i].charges, trace[i].next, err = c.list(ctx, k, "charges", p); err != nil {
				return err
			}
		}
		if c.json {
			out := make([]map[string]any, len(lines))
			for i, l := range lines {
				out[i] = l
				if trace[i].charges != nil {
					l["charges"] = trace[i].charges
				}
				if trace[i].next != "" {
					l["next"] = trace[i].next
				}
			}
			return c.printJSON(map[string]any{"invoiceId": inv["invoiceId"], "period": period, "currency": currency,
				"status": inv["status"], "total": inv["total"], "lines": out})
		}
		fmt.Fprintf(c.out, "invoice %s  period %s  currency %s  status %s  total %s\n",
			text(inv["invoiceId"]), period, currency, text(inv["status"]), text(inv["total"]))
		for i, l := range lines {
			fmt.Fprintf(c.out, "\nline %s  quantity %s  charges %s  amount %s\n", text(l["lineId"]), text(l["quantity"]),
				text(l["chargeCount"]), text(l["amount"]))
			for _, ch := range trace[i].charges {
				late := ""
				if ch["late"] == true {
					late = "  late"
				}
				fmt.Fprintf(c.out, "  charge %s  quantity %s  amount %s  occurred %s%s\n", text(ch["chargeId"]),
					text(ch["quantity"]), text(ch["amount"]), text(ch["occurredAt"]), late)
				f, _ := ch["fact"].(map[string]any)
				if f == nil {
					fmt.Fprintf(c.out, "    fact %s  (not projected yet)\n", text(ch["usageEventId"]))
					continue
				}
				fmt.Fprintf(c.out, "    fact %s/%s  usage %s  quantity %s  properties %s\n", text(f["sourceSystem"]),
					text(f["sourceEventId"]), text(f["usageId"]), text(f["quantity"]), properties(f["properties"]))
			}
			if trace[i].next != "" {
				fmt.Fprintf(c.out, "  (more charges: -all or a larger -limit)\n")
			}
		}
		return nil
	}
}

// properties prints a fact's properties as name=value, in name order.
func properties(v any) string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return "-"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + text(m[k])
	}
	return strings.Join(parts, " ")
}

// periodReconcile prints the reconciliation of one of the tenant's periods.
func periodReconcile(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "PERIOD"); err != nil {
			return err
		}
		var v map[string]any
		k := call{service: "query", method: http.MethodGet, path: c.tenantPath("periods", args[0], "reconciliation")}
		if _, err := c.decode(ctx, k, &v); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(v)
		}
		if err := c.object(v, "tenantId", "period", "counts.usageFacts", "counts.charges", "counts.invoiceLines",
			"counts.queryUsage", "mismatchCount"); err != nil {
			return err
		}
		if ms := maps(v["mismatches"]); len(ms) > 0 {
			fmt.Fprintln(c.out, "\nmismatches:")
			c.table(ms, col("KIND", "kind"), col("ORIGIN EVENT", "originEventId"), col("DETAIL", "detail"))
		}
		return nil
	}
}
