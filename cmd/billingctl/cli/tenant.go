package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/auth"
)

// The tenant commands. Each signs (when it signs its own token) only the
// role its route admits.
func init() {
	register(
		&command{name: "price activate", short: "activate a price of a meter (unit, graduated, volume or package), for some dimension values if told", role: auth.RoleBillingAdmin, flags: priceActivate},
		&command{name: "price list", short: "the tenant's prices, every version", role: auth.RoleViewer, flags: listCommand(listSpec{
			service: "meter", path: "prices", key: "prices",
			filters: []filter{{"meter", "meterCode", "only this meter"}},
			cols: []column{col("METER", "meterCode"), col("CURRENCY", "currency"), col("VERSION", "version"),
				col("MODEL", "model"), col("UNIT PRICE", "unitPrice"), col("TIERS", "tiers"), col("PACKAGE", "packageSize"),
				col("PACKAGE PRICE", "packagePrice"), col("DIMENSIONS", "dimensions"), col("EFFECTIVE AT", "effectiveAt")},
		})},
		&command{name: "usage send", args: "[FILE|-]", short: "send usage facts from a CSV or NDJSON file (or stdin) in batches; summary of accepted, replayed, refused", role: auth.RoleIngest, flags: usageSend},
		&command{name: "usage get", args: "USAGE_ID", short: "one usage fact", role: auth.RoleIngest, flags: usageGet},
		&command{name: "charges", short: "the tenant's charges of a period (-period)", role: auth.RoleViewer, flags: listCommand(listSpec{
			service: "billing", path: "charges", key: "charges",
			filters: []filter{{"period", "period", "the period, YYYY-MM (required)"}, {"meter", "meterCode", "only this meter"},
				{"price-version", "priceVersion", "only this price version"}},
			cols: []column{col("PERIOD", "period"), col("METER", "meterCode"), col("QUANTITY", "quantity"),
				col("CURRENCY", "currency"), col("UNIT PRICE", "unitPrice"), col("VERSION", "priceVersion"), col("AMOUNT", "amount"),
				col("LATE", "late"), col("USAGE EVENT", "usageEventId")},
		})},
		&command{name: "period show", args: "PERIOD", short: "a period's status and running estimate (PERIOD is YYYY-MM)", role: auth.RoleViewer, flags: periodShow},
		&command{name: "period close", args: "PERIOD", short: "close a period now", role: auth.RoleBillingAdmin, flags: periodClose},
		&command{name: "settings set", short: "the tenant's time zone, grace period and tax rates (for periods not yet started)", role: auth.RoleBillingAdmin, flags: settingsSet},
		&command{name: "invoice list", short: "the tenant's invoices", role: auth.RoleViewer, flags: listCommand(listSpec{
			service: "invoice", path: "invoices", key: "invoices",
			filters: []filter{{"period", "period", "only this period (YYYY-MM)"}},
			cols: []column{col("INVOICE", "invoiceId"), col("NUMBER", "number"), col("PERIOD", "period"),
				col("CURRENCY", "currency"), col("STATUS", "status"), col("SUBTOTAL", "subtotal"), col("TOTAL", "total"), col("ISSUED AT", "issuedAt")},
		})},
		&command{name: "invoice show", args: "INVOICE_ID", short: "an invoice: totals and corrections", role: auth.RoleViewer, flags: invoiceShow},
		&command{name: "invoice lines", args: "INVOICE_ID", short: "an invoice's lines", role: auth.RoleViewer, flags: invoiceLines},
		&command{name: "adjust", short: "post an adjustment to a charge (a negative amount is a credit)", role: auth.RoleBillingAdmin, flags: adjust},
		&command{name: "summary", short: "the tenant's summary: usage, charged, adjusted, invoiced", role: auth.RoleViewer, flags: summary},
		&command{name: "credit grant", short: "grant the tenant a prepaid credit (-currency, -amount in whole minor units, -reason; -effective-at, -expires-at, -priority)", role: auth.RoleBillingAdmin, flags: creditGrant},
		&command{name: "credit list", short: "the tenant's credit grants with their balances and statuses", role: auth.RoleViewer, flags: listCommand(listSpec{
			service: "invoice", path: "credit-grants", key: "grants",
			cols: []column{col("GRANT", "grantId"), col("CURRENCY", "currency"), col("AMOUNT", "amount"), col("BALANCE", "balance"),
				col("STATUS", "status"), col("PRIORITY", "priority"), col("EFFECTIVE AT", "effectiveAt"), col("EXPIRES AT", "expiresAt")},
		})},
		&command{name: "alert create", short: "define a usage alert (-meter) or a spend alert (-currency) at -threshold, told once per period by an alert.triggered webhook", role: auth.RoleBillingAdmin, flags: alertCreate},
		&command{name: "alert list", short: "the tenant's alerts", role: auth.RoleViewer, flags: listCommand(listSpec{
			service: "invoice", path: "alerts", key: "alerts",
			cols: []column{col("ALERT", "alertId"), col("KIND", "kind"), col("METER", "meterCode"), col("CURRENCY", "currency"),
				col("THRESHOLD", "threshold"), col("CREATED BY", "actor"), col("CREATED AT", "createdAt")},
		})},
		&command{name: "alert delete", args: "ALERT_ID", short: "delete an alert: it is told no more", role: auth.RoleBillingAdmin, flags: alertDelete},
		&command{name: "webhook add", args: "URL", short: "add a webhook endpoint (its secret is shown once)", role: auth.RoleBillingAdmin, flags: webhookAdd},
		&command{name: "webhook list", short: "the tenant's webhook endpoints", role: auth.RoleBillingAdmin, flags: listCommand(listSpec{
			service: "invoice", path: "webhook-endpoints", key: "endpoints",
			cols: []column{col("ENDPOINT", "endpointId"), col("URL", "url"), col("CREATED BY", "createdBy"), col("CREATED AT", "createdAt")},
		})},
		&command{name: "webhook delete", args: "ENDPOINT_ID", short: "remove a webhook endpoint", role: auth.RoleBillingAdmin, flags: webhookDelete},
	)
}

type runFunc = func(ctx context.Context, c *Client, args []string) error

// filter is a list's query parameter, set by a flag.
type filter struct{ flag, param, help string }

// listSpec is a list command: GET path (under the tenant's path unless it
// starts with /) on service, its items under key, printed as cols.
type listSpec struct {
	service, path, key string
	filters            []filter
	cols               []column
}

// listCommand is the command of a list: its filters, the paging flags
// (-limit, -all, -cursor), and the table or JSON of the items.
func listCommand(spec listSpec) func(fs *flag.FlagSet) runFunc {
	return func(fs *flag.FlagSet) runFunc {
		var p paging
		p.register(fs)
		values := make([]*string, len(spec.filters))
		for i, f := range spec.filters {
			values[i] = fs.String(f.flag, "", f.help)
		}
		return func(ctx context.Context, c *Client, args []string) error {
			if err := positional(args); err != nil {
				return err
			}
			q := url.Values{}
			for i, f := range spec.filters {
				if *values[i] != "" {
					q.Set(f.param, *values[i])
				}
			}
			path := spec.path
			if !strings.HasPrefix(path, "/") {
				path = c.tenantPath(path)
			}
			items, next, err := c.list(ctx, call{service: spec.service, method: http.MethodGet, path: path, query: q}, spec.key, p)
			if err != nil {
				return err
			}
			return c.printList(spec.key, items, next, spec.cols...)
		}
	}
}

// positional checks the count of positional arguments.
func positional(args []string, names ...string) error {
	if len(args) != len(names) {
		if len(names) == 0 {
			return usagef("unexpected arguments %q", args)
		}
		return usagef("want %s, got %d argument(s)", strings.Join(names, " "), len(args))
	}
	return nil
}

// idempotencyKey is the key a command sends: the one given, else one
// derived from the request itself, so that running the same command again
// replays the first answer instead of doing it twice.
func idempotencyKey(given, method, path string, body any) string {
	if given != "" {
		return given
	}
	raw, _ := json.Marshal(body)
	h := sha256.Sum256([]byte(method + " " + path + "\n" + string(raw)))
	return "billingctl-" + hex.EncodeToString(h[:16])
}

// command sends a command with an Idempotency-Key and prints its answer,
// saying when it was a replay.
func (c *Client) command(ctx context.Context, k call, key string, fields ...string) error {
	if k.header == nil {
		k.header = map[string]string{}
	}
	k.header["Idempotency-Key"] = idempotencyKey(key, k.method, k.path, k.body)
	var v map[string]any
	resp, err := c.decode(ctx, k, &v)
	if err != nil {
		return err
	}
	if resp.header.Get("Idempotent-Replayed") == "true" && !c.json {
		fmt.Fprintln(c.err, "(replayed: the first answer to this Idempotency-Key; nothing was done again)")
	}
	if v == nil {
		return nil
	}
	return c.object(v, fields...)
}

// decimalArg parses a decimal flag: nil when not given.
func decimalArg(name, v string) (*decimal.Decimal, error) {
	if v == "" {
		return nil, nil
	}
	d, err := decimal.NewFromString(v)
	if err != nil {
		return nil, usagef("-%s %q is not a decimal number such as 0.25", name, v)
	}
	return &d, nil
}

// tiersFlag collects -tier UPTO:UNITPRICE[:FLATFEE] (UPTO "inf" or empty
// for the last tier).
type tiersFlag []meterapi.TierRequest

func (t *tiersFlag) String() string { return fmt.Sprint(len(*t)) }

func (t *tiersFlag) Set(v string) error {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("want UPTO:UNITPRICE[:FLATFEE], got %q", v)
	}
	var tier meterapi.TierRequest
	var err error
	if up := parts[0]; up != "" && up != "inf" {
		if tier.UpTo, err = decimalArg("tier", up); err != nil {
			return err
		}
	}
	if tier.UnitPrice, err = decimalArg("tier", parts[1]); err != nil {
		return err
	}
	if len(parts) == 3 {
		if tier.FlatFee, err = decimalArg("tier", parts[2]); err != nil {
			return err
		}
	}
	*t = append(*t, tier)
	return nil
}

// taxRatesFlag collects -tax-rate CODE:NAME:RATE, in order.
type taxRatesFlag []billingapi.TaxRate

func (t *taxRatesFlag) String() string {
	if t == nil {
		return ""
	}
	parts := make([]string, len(*t))
	for i, r := range *t {
		parts[i] = r.Code + ":" + r.Name + ":" + r.Rate.String()
	}
	return strings.Join(parts, ",")
}

func (t *taxRatesFlag) Set(v string) error {
	code, rest, ok := strings.Cut(v, ":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return fmt.Errorf("want CODE:NAME:RATE such as VAT:VAT 20%%:0.2, got %q", v)
	}
	rate, err := decimal.NewFromString(rest[i+1:])
	if err != nil {
		return fmt.Errorf("rate of %q: %v", v, err)
	}
	*t = append(*t, billingapi.TaxRate{Code: code, Name: rest[:i], Rate: rate})
	return nil
}

// dimensionsFlag collects -dimension NAME=VALUE: the dimension values a
// price is for.
type dimensionsFlag meterapi.PriceDimensions

func (d *dimensionsFlag) String() string {
	if d == nil || len(*d) == 0 {
		return ""
	}
	m := make(map[string]any, len(*d))
	for k, v := range *d {
		m[k] = v
	}
	return text(m)
}

func (d *dimensionsFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" || value == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", v)
	}
	if *d == nil {
		*d = dimensionsFlag{}
	}
	if _, dup := (*d)[name]; dup {
		return fmt.Errorf("dimension %q given twice", name)
	}
	(*d)[name] = value
	return nil
}

func priceActivate(fs *flag.FlagSet) runFunc {
	var tiers tiersFlag
	var dims dimensionsFlag
	meter := fs.String("meter", "", "the meter code (required)")
	currency := fs.String("currency", "", "ISO 4217 currency (required)")
	model := fs.String("model", "", "unit (default), graduated, volume or package")
	unitPrice := fs.String("unit-price", "", "the unit price of a unit price, a decimal")
	fs.Var(&tiers, "tier", "a tier of a graduated or volume price, UPTO:UNITPRICE[:FLATFEE] (UPTO inf on the last); repeat in order")
	packageSize := fs.String("package-size", "", "units per package of a package price")
	packagePrice := fs.String("package-price", "", "the price of a package")
	fs.Var(&dims, "dimension", "NAME=VALUE: the price is for facts whose property NAME (a dimension of the meter) is VALUE; repeat for several")
	effectiveAt := fs.String("effective-at", "", "when the price takes effect, RFC 3339 (default now)")
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		if *meter == "" || *currency == "" {
			return usagef("-meter and -currency are required")
		}
		req := meterapi.ActivatePriceRequest{MeterCode: *meter, Currency: *currency}
		var err error
		if *model != "" {
			m := meterapi.PricingModel(*model)
			req.Model = &m
		}
		if len(tiers) > 0 {
			req.Tiers = (*[]meterapi.TierRequest)(&tiers)
		}
		if len(dims) > 0 {
			req.Dimensions = (*meterapi.PriceDimensions)(&dims)
		}
		if req.UnitPrice, err = decimalArg("unit-price", *unitPrice); err != nil {
			return err
		}
		if req.PackageSize, err = decimalArg("package-size", *packageSize); err != nil {
			return err
		}
		if req.PackagePrice, err = decimalArg("package-price", *packagePrice); err != nil {
			return err
		}
		if *effectiveAt != "" {
			at, err := time.Parse(time.RFC3339Nano, *effectiveAt)
			if err != nil {
				return usagef("-effective-at %q is not an RFC 3339 time such as 2027-01-01T00:00:00Z", *effectiveAt)
			}
			req.EffectiveAt = &at
		}
		return c.command(ctx, call{service: "meter", method: http.MethodPost, path: c.tenantPath("prices"), body: req}, *key,
			"priceId", "meterCode", "currency", "model", "unitPrice", "tiers", "packageSize", "packagePrice", "dimensions", "effectiveAt", "version", "eventId")
	}
}

func usageGet(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "USAGE_ID"); err != nil {
			return err
		}
		var v map[string]any
		if _, err := c.decode(ctx, call{service: "usage", method: http.MethodGet, path: c.tenantPath("usage", args[0])}, &v); err != nil {
			return err
		}
		return c.object(v)
	}
}

func periodShow(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "PERIOD"); err != nil {
			return err
		}
		var v map[string]any
		if _, err := c.decode(ctx, call{service: "billing", method: http.MethodGet, path: c.tenantPath("periods", args[0])}, &v); err != nil {
			return err
		}
		return c.object(v, "period", "status", "closesAt", "estimate")
	}
}

func periodClose(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "PERIOD"); err != nil {
			return err
		}
		return c.command(ctx, call{service: "billing", method: http.MethodPost, path: c.tenantPath("periods", args[0], "close")}, *key)
	}
}

func settingsSet(fs *flag.FlagSet) runFunc {
	tz := fs.String("time-zone", "", "IANA time zone of the tenant's periods, such as Europe/Paris")
	grace := fs.String("grace-period", "", "ISO 8601 duration late usage is still taken after a period ends, such as PT6H")
	var rates taxRatesFlag
	fs.Var(&rates, "tax-rate", "CODE:NAME:RATE, a tax line on each invoice, such as VAT:VAT 20%:0.2 (repeat for several, in order)")
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		var req billingapi.SettingsRequest
		if *tz != "" {
			req.TimeZone = tz
		}
		if *grace != "" {
			req.GracePeriod = grace
		}
		if len(rates) > 0 {
			req.TaxRates = (*[]billingapi.TaxRate)(&rates)
		}
		if req.TimeZone == nil && req.GracePeriod == nil && req.TaxRates == nil {
			return usagef("give -time-zone, -grace-period, -tax-rate or several (the settings are replaced whole: what is not given takes its default)")
		}
		return c.command(ctx, call{service: "billing", method: http.MethodPut, path: c.tenantPath("settings"), body: req}, *key)
	}
}

func (c *Client) invoice(ctx context.Context, id string) (map[string]any, error) {
	var v map[string]any
	_, err := c.decode(ctx, call{service: "invoice", method: http.MethodGet, path: c.tenantPath("invoices", id)}, &v)
	return v, err
}

func invoiceShow(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "INVOICE_ID"); err != nil {
			return err
		}
		v, err := c.invoice(ctx, args[0])
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(v)
		}
		lines, _ := v["lines"].([]any)
		v["lines"] = json.Number(fmt.Sprint(len(lines)))
		if err := c.object(v, "invoiceId", "number", "tenantId", "period", "currency", "status", "lines", "subtotal", "taxTotal", "total",
			"creditsApplied", "amountDue", "issuedAt"); err != nil {
			return err
		}
		if cs := maps(v["corrections"]); len(cs) > 0 {
			fmt.Fprintln(c.out, "\ncorrections:")
			c.table(cs, col("CORRECTION", "correctionId"), col("ORIGIN EVENT", "originEventId"), col("AMOUNT", "amount"), col("ISSUED AT", "issuedAt"))
		}
		return nil
	}
}

// invoiceLines prints an invoice's lines, a page of --limit at a time (the
// invoice answers them all at once; -cursor is the index to start at).
func invoiceLines(fs *flag.FlagSet) runFunc {
	var p paging
	p.register(fs)
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "INVOICE_ID"); err != nil {
			return err
		}
		v, err := c.invoice(ctx, args[0])
		if err != nil {
			return err
		}
		lines := maps(v["lines"])
		start := 0
		if p.cursor != "" {
			if _, err := fmt.Sscan(p.cursor, &start); err != nil || start < 0 || start > len(lines) {
				return usagef("-cursor must be a line index from 0 to %d", len(lines))
			}
		}
		end, next := len(lines), ""
		if !p.all && start+p.limit < len(lines) {
			end, next = start+p.limit, fmt.Sprint(start+p.limit)
		}
		return c.printList("lines", lines[start:end], next, col("KIND", "kind"), col("METER", "meterCode"), col("VERSION", "priceVersion"),
			col("QUANTITY", "quantity"), col("CHARGES", "chargeCount"), col("AMOUNT", "amount"), col("ORIGIN EVENT", "originEventId"))
	}
}

// maps is v as a list of objects (nil when it is not one).
func maps(v any) []map[string]any {
	l, _ := v.([]any)
	var out []map[string]any
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func adjust(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	correctionOf := fs.String("correction-of", "", "the chargeId of the charge corrected (required; billingctl charges lists them)")
	amount := fs.String("amount", "", "the amount, a decimal; negative for a credit (required)")
	currency := fs.String("currency", "", "ISO 4217 currency (required)")
	reason := fs.String("reason", "", "why (required, audited)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		if *correctionOf == "" || *amount == "" || *currency == "" || *reason == "" {
			return usagef("-correction-of, -amount, -currency and -reason are required")
		}
		a, err := decimalArg("amount", *amount)
		if err != nil {
			return err
		}
		req := billingapi.AdjustmentRequest{CorrectionOf: *correctionOf, Amount: *a, Currency: *currency, Reason: *reason}
		return c.command(ctx, call{service: "billing", method: http.MethodPost, path: c.tenantPath("adjustments"), body: req}, *key)
	}
}

func creditGrant(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	currency := fs.String("currency", "", "ISO 4217 currency (required)")
	amount := fs.String("amount", "", "the amount, in whole minor units such as 500 or 49.90 (required)")
	reason := fs.String("reason", "", "why (required, audited)")
	effective := fs.String("effective-at", "", "RFC 3339 time it may be drawn from (default now): invoices draw the grants in effect at their period's end")
	expires := fs.String("expires-at", "", "RFC 3339 time what is left becomes void (default never)")
	priority := fs.Int("priority", 0, "0 (drawn first) to 1000; then the earliest expiry, then the oldest")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		if *currency == "" || *amount == "" || *reason == "" {
			return usagef("-currency, -amount and -reason are required")
		}
		a, err := decimalArg("amount", *amount)
		if err != nil {
			return err
		}
		req := invoiceapi.CreditGrantRequest{Currency: *currency, Amount: *a, Reason: *reason, Priority: priority}
		for _, t := range []struct {
			name, value string
			into        **time.Time
		}{{"effective-at", *effective, &req.EffectiveAt}, {"expires-at", *expires, &req.ExpiresAt}} {
			if t.value == "" {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, t.value)
			if err != nil {
				return usagef("-%s: want an RFC 3339 time such as 2026-12-01T00:00:00Z, got %q", t.name, t.value)
			}
			*t.into = &at
		}
		return c.command(ctx, call{service: "invoice", method: http.MethodPost, path: c.tenantPath("credit-grants"), body: req}, *key)
	}
}

func alertCreate(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	meter := fs.String("meter", "", "a usage alert on this meter's period quantity (its aggregation)")
	currency := fs.String("currency", "", "a spend alert on this ISO 4217 currency's running total (the open invoice's subtotal)")
	threshold := fs.String("threshold", "", "the figure it is told at, a decimal above zero; a spend one in whole minor units (required)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		if (*meter == "") == (*currency == "") || *threshold == "" {
			return usagef("-threshold and one of -meter (a usage alert) or -currency (a spend alert) are required")
		}
		t, err := decimalArg("threshold", *threshold)
		if err != nil {
			return err
		}
		req := invoiceapi.AlertRequest{Kind: invoiceapi.AlertRequestKindUsage, Threshold: *t}
		if *meter != "" {
			req.MeterCode = meter
		} else {
			req.Kind, req.Currency = invoiceapi.AlertRequestKindSpend, currency
		}
		return c.command(ctx, call{service: "invoice", method: http.MethodPost, path: c.tenantPath("alerts"), body: req}, *key)
	}
}

func alertDelete(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "ALERT_ID"); err != nil {
			return err
		}
		if _, err := c.do(ctx, call{service: "invoice", method: http.MethodDelete, path: c.tenantPath("alerts", args[0])}); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(map[string]string{"alertId": args[0], "status": "deleted"})
		}
		fmt.Fprintf(c.out, "alert %s deleted\n", args[0])
		return nil
	}
}

func summary(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		var v map[string]any
		if _, err := c.decode(ctx, call{service: "query", method: http.MethodGet, path: c.tenantPath("summary")}, &v); err != nil {
			return err
		}
		return c.object(v, "tenantId", "usage.count", "usage.quantityByMeter", "charged", "adjusted", "invoiced", "lastEventAt")
	}
}

func webhookAdd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "URL"); err != nil {
			return err
		}
		var v map[string]any
		k := call{service: "invoice", method: http.MethodPost, path: c.tenantPath("webhook-endpoints"), body: invoiceapi.WebhookEndpointRequest{Url: args[0]}}
		if _, err := c.decode(ctx, k, &v); err != nil {
			return err
		}
		return c.object(v, "endpointId", "url", "secret", "createdBy", "createdAt")
	}
}

func webhookDelete(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "ENDPOINT_ID"); err != nil {
			return err
		}
		if _, err := c.do(ctx, call{service: "invoice", method: http.MethodDelete, path: c.tenantPath("webhook-endpoints", args[0])}); err != nil {
			return err
		}
		if !c.json {
			fmt.Fprintf(c.out, "endpoint %s removed\n", args[0])
		} else {
			return c.printJSON(map[string]string{"endpointId": args[0], "status": "removed"})
		}
		return nil
	}
}
