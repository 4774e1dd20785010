package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/auth"
)

// The operator commands: the operator API of query (docs/operating.md).
func init() {
	register(
		&command{name: "recovery", short: "per service: outbox backlog, dead letters, deferred and quarantined", role: roleOperator, flags: recovery},
		&command{name: "quarantine", short: "quarantined events (filters: -service, -reason, -tenant-id, -state all)", role: roleOperator, flags: listCommand(listSpec{
			service: "query", path: "/v1/operator/quarantine", key: "items",
			filters: []filter{{"service", "service", "only this service's"}, {"reason", "reason", "only this reason (unsupported_schema, ...)"},
				{"tenant-id", "tenantId", "only this tenant's"}, {"state", "state", "all: also the events redriven already"}},
			cols: []column{col("SERVICE", "service"), col("EVENT", "eventId"), col("TYPE", "eventType"),
				col("TENANT", "tenantId"), col("REASON", "reason"), col("STATE", "state"), col("QUARANTINED AT", "quarantinedAt")},
		})},
		&command{name: "redrive", short: "redrive a quarantined event (-service, -event, -reason), wait for its outcome, show its audit", role: roleOperator, flags: redrive},
		&command{name: "audit", args: "REDRIVE_ID", short: "a redrive (of an event or a dead letter, or a webhook retry) and its audit trail", role: roleOperator, flags: audit},
		&command{name: "dead-letters list", short: "outbox dead letters (-service for one service)", role: roleOperator, flags: listCommand(listSpec{
			service: "query", path: "/v1/operator/dead-letters", key: "items",
			filters: []filter{{"service", "service", "only this service's"}},
			cols: []column{col("SERVICE", "service"), col("EVENT", "eventId"), col("TYPE", "eventType"),
				col("TOPIC", "topic"), col("ATTEMPTS", "attempts"), col("DEAD AT", "deadAt"), col("LAST ERROR", "lastError")},
		})},
		&command{name: "dead-letters release", short: "redrive a dead letter: sent again by its relay (-service, -event, -reason)", role: roleOperator, flags: redriveDeadLetter},
		&command{name: "reconcile", short: "compare usage facts, charges, invoice lines and query totals of a tenant and period (-tenant-id, -period)", role: roleOperator, flags: reconcile},
		&command{name: "webhook-intents list", short: "webhook deliveries (filters: -status, -tenant-id)", role: roleOperator, flags: listCommand(listSpec{
			service: "query", path: "/v1/operator/webhook-intents", key: "items",
			filters: []filter{{"status", "status", "only this status: pending, leased, accepted, failed or expired"}, {"tenant-id", "tenantId", "only this tenant's"}},
			cols: []column{col("INTENT", "intentId"), col("TENANT", "tenantId"), col("TYPE", "eventType"),
				col("STATUS", "status"), col("ATTEMPTS", "attempts"), col("LAST STATUS", "lastStatusCode"), col("URL", "url"), col("LAST ERROR", "lastError")},
		})},
		&command{name: "webhook-intents stats", short: "webhook deliveries by status, the oldest pending", role: roleOperator, flags: intentsStats},
		&command{name: "webhook-intents retry", args: "INTENT_ID", short: "retry a failed or expired webhook delivery (-reason), audited", role: roleOperator, flags: intentsRetry},
		&command{name: "token", short: "print a bearer token signed with -key (or -dev) for -role (and -tenant)", flags: token},
	)
}

func recovery(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		var v struct {
			Services map[string]map[string]any `json:"services"`
		}
		var raw map[string]any
		resp, err := c.decode(ctx, call{service: "query", method: http.MethodGet, path: "/v1/operator/recovery"}, &raw)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(raw)
		}
		if err := json.Unmarshal(resp.body, &v); err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
		names := make([]string, 0, len(v.Services))
		for n := range v.Services {
			names = append(names, n)
		}
		sort.Strings(names)
		rows := make([]map[string]any, len(names))
		for i, n := range names {
			rows[i] = field(raw, "services").(map[string]any)[n].(map[string]any)
			rows[i]["name"] = n
		}
		c.table(rows, col("SERVICE", "name"), col("AVAILABLE", "available"), col("OUTBOX PENDING", "outboxPending"),
			col("OLDEST (s)", "outboxOldestAgeSeconds"), col("DEAD LETTERS", "deadLetters"), col("DEFERRED", "deferred"),
			col("OLDEST DEFERRED (s)", "deferredOldestAgeSeconds"), col("QUARANTINED", "quarantined"), col("ERROR", "error"))
		return nil
	}
}

// correlation is the X-Correlation-Id sent: the one given, else a new one.
func correlation(given string) string {
	if given != "" {
		return given
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "billingctl-" + hex.EncodeToString(b)
}

// submitFlags are the flags of a redrive, of an event or of a dead letter.
type submitFlags struct {
	req  queryapi.RedriveRequest
	corr string
	wait time.Duration
}

func (s *submitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.req.Service, "service", "", "the service holding the event (required)")
	fs.StringVar(&s.req.EventId, "event", "", "the event id (required)")
	fs.StringVar(&s.req.Reason, "reason", "", "why, for the audit (required)")
	fs.StringVar(&s.corr, "correlation-id", "", "the X-Correlation-Id (default: a new one)")
	fs.DurationVar(&s.wait, "wait", 60*time.Second, "how long to wait for the outcome (0: do not wait)")
}

// submit posts a redrive and, unless told not to wait, polls it
// until it completes; then prints it with its audit.
func (c *Client) submit(ctx context.Context, path string, s submitFlags) error {
	if s.req.Service == "" || s.req.EventId == "" || s.req.Reason == "" {
		return usagef("-service, -event and -reason are required")
	}
	var sub struct {
		RedriveID string `json:"redriveId"`
		State     string `json:"state"`
	}
	if _, err := c.decode(ctx, call{service: "query", method: http.MethodPost, path: path, body: s.req,
		header: map[string]string{"X-Correlation-Id": correlation(s.corr)}}, &sub); err != nil {
		return err
	}
	if s.wait <= 0 {
		return c.object(map[string]any{"redriveId": sub.RedriveID, "state": sub.State}, "redriveId", "state")
	}
	deadline := time.Now().Add(s.wait)
	for {
		rd, err := c.redriveStatus(ctx, sub.RedriveID)
		if err != nil {
			return err
		}
		if rd["state"] == "completed" || time.Now().After(deadline) {
			if rd["state"] != "completed" && !c.json {
				fmt.Fprintf(c.err, "(not completed after %v; billingctl audit %s shows it later)\n", s.wait, sub.RedriveID)
			}
			if err := c.printRedrive(rd); err != nil {
				return err
			}
			if rd["outcome"] == outcomeNotFound {
				return notFoundError{service: s.req.Service, event: s.req.EventId}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// outcomeNotFound is the outcome of a redrive whose service did not hold
// the event: query refuses such a request at once (404 event_not_found)
// when it can ask the service, else the service answers it later.
const outcomeNotFound = "not_found"

// notFoundError is a redrive that completed not_found: exit code 1, as a
// refusal, so that a typo in a script stops it.
type notFoundError struct{ service, event string }

func (e notFoundError) Error() string {
	return fmt.Sprintf("%s holds no such event %s (outcome not_found)", e.service, e.event)
}

func (c *Client) redriveStatus(ctx context.Context, id string) (map[string]any, error) {
	var v map[string]any
	_, err := c.decode(ctx, call{service: "query", method: http.MethodGet, path: "/v1/operator/redrives/" + url.PathEscape(id)}, &v)
	return v, err
}

func (c *Client) printRedrive(rd map[string]any) error {
	if c.json {
		return c.printJSON(rd)
	}
	if err := c.object(rd, "redriveId", "service", "eventId", "action", "state", "outcome"); err != nil {
		return err
	}
	fmt.Fprintln(c.out, "\naudit:")
	c.table(maps(rd["audit"]), col("AT", "at"), col("STATE", "state"), col("ACTOR", "actor"), col("CORRELATION ID", "correlationId"),
		col("REASON", "reason"), col("OUTCOME", "outcome"))
	return nil
}

func redrive(fs *flag.FlagSet) runFunc {
	var s submitFlags
	s.register(fs)
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		return c.submit(ctx, "/v1/operator/redrives", s)
	}
}

func redriveDeadLetter(fs *flag.FlagSet) runFunc {
	var s submitFlags
	s.register(fs)
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		return c.submit(ctx, "/v1/operator/dead-letters/release", s)
	}
}

func audit(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "REDRIVE_ID"); err != nil {
			return err
		}
		rd, err := c.redriveStatus(ctx, args[0])
		if err != nil {
			return err
		}
		return c.printRedrive(rd)
	}
}

func reconcile(fs *flag.FlagSet) runFunc {
	tenant := fs.String("tenant-id", "", "the tenant (required)")
	period := fs.String("period", "", "the period, YYYY-MM (required)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		if *tenant == "" || *period == "" {
			return usagef("-tenant-id and -period are required")
		}
		// A reconciliation may take minutes (the operator API extends its
		// own deadline to 15).
		c.http.Timeout = max(c.http.Timeout, 15*time.Minute)
		var v map[string]any
		q := url.Values{"tenantId": {*tenant}, "period": {*period}}
		if _, err := c.decode(ctx, call{service: "query", method: http.MethodGet, path: "/v1/operator/reconciliation", query: q}, &v); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(v)
		}
		if err := c.object(v, "tenantId", "period", "counts.usageFacts", "counts.charges", "counts.invoiceLines", "counts.queryUsage", "mismatchCount"); err != nil {
			return err
		}
		if ms := maps(v["mismatches"]); len(ms) > 0 {
			fmt.Fprintln(c.out, "\nmismatches:")
			c.table(ms, col("KIND", "kind"), col("ORIGIN EVENT", "originEventId"), col("DETAIL", "detail"))
		} else {
			fmt.Fprintln(c.out, "\nno mismatches: reconciled")
		}
		return nil
	}
}

func intentsStats(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		var v map[string]any
		if _, err := c.decode(ctx, call{service: "query", method: http.MethodGet, path: "/v1/operator/webhook-intents/stats"}, &v); err != nil {
			return err
		}
		return c.object(v)
	}
}

func intentsRetry(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why, for the audit (required)")
	corr := fs.String("correlation-id", "", "the X-Correlation-Id (default: a new one)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "INTENT_ID"); err != nil {
			return err
		}
		if *reason == "" {
			return usagef("-reason is required")
		}
		var v map[string]any
		if _, err := c.decode(ctx, call{service: "query", method: http.MethodPost, path: "/v1/operator/webhook-intents/" + url.PathEscape(args[0]) + "/retry",
			body: queryapi.RetryRequest{Reason: *reason}, header: map[string]string{"X-Correlation-Id": correlation(*corr)}}, &v); err != nil {
			return err
		}
		return c.object(v)
	}
}

// token prints a token signed as the global flags say, for -role.
func token(fs *flag.FlagSet) runFunc {
	role := fs.String("role", auth.RoleOperator, "ingest, viewer, billing-admin (a comma list of these, with -tenant), operator, catalog-admin or platform-ingest")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid (services refuse more than 1h)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args); err != nil {
			return err
		}
		c.cfg.tokenTTL = *ttl
		tok, err := c.cfg.sign(IO{Err: c.err}, *role)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.out, tok)
		return nil
	}
}
