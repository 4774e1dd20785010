package billingctl_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/cmd/billingctl/cli"
)

// catalogFlow: a catalog meter defined, replayed and refused when redefined;
// listed; a price for one of its dimension values; usage with properties
// from NDJSON and CSV; CloudEvents from a file, refused as a whole for one
// bad event, then sent; the usage query as a table.
func catalogFlow(t *testing.T, c *ctl) {
	n := time.Now().UnixNano()
	meter := fmt.Sprintf("tokens_%d", n)
	eventType := fmt.Sprintf("com.example.tokens.%d", n)
	tenant := fmt.Sprintf("cli-cat-%d", n)
	tn := []string{"-tenant", tenant}
	define := []string{"meter", "define", meter, "-name", "Tokens", "-aggregation", "sum", "-value-property", "tokens",
		"-dimension", "model", "-dimension", "region", "-event-type", eventType}

	t.Run("meter define", func(t *testing.T) {
		c := c.with(t)
		var m map[string]any
		c.json(&m, define...)
		if m["code"] != meter || m["aggregation"] != "sum" || m["valueProperty"] != "tokens" || m["eventType"] != eventType ||
			fmt.Sprint(m["dimensions"]) != "[model region]" || m["definedAt"] == nil {
			t.Fatalf("meter define: %v", m)
		}
		// Again: the same Idempotency-Key (derived from the request), the
		// first answer replayed.
		r := c.run("", define...)
		if r.code != 0 || !strings.Contains(r.errOut, "replayed") || !strings.Contains(r.out, eventType) {
			t.Fatalf("meter define again: exit %d, want 0 and a replay told\n%s%s", r.code, r.out, r.errOut)
		}
		// The same code, another definition: refused, the meter unchanged.
		r = c.run("", "meter", "define", meter, "-name", "Tokens", "-aggregation", "max", "-value-property", "tokens")
		if r.code != cli.ExitRefused || !strings.Contains(r.errOut, "409 Conflict (code meter_exists)") {
			t.Fatalf("meter define of another definition: exit %d, want %d and meter_exists\n%s%s", r.code, cli.ExitRefused, r.out, r.errOut)
		}
		out := c.ok("meter", "show", meter)
		if !strings.Contains(out, "sum") || strings.Contains(out, "max") {
			t.Fatalf("meter show after the refused redefinition:\n%s", out)
		}
		// A tenant's viewer reads the catalog too.
		out = c.ok(append(tn, "meter", "show", meter)...)
		if !strings.Contains(out, "model, region") {
			t.Fatalf("meter show by a viewer:\n%s", out)
		}
	})

	t.Run("meter list", func(t *testing.T) {
		c := c.with(t)
		var list struct{ Meters []map[string]any }
		c.json(&list, "meter", "list", "-all")
		found := false
		for _, m := range list.Meters {
			found = found || m["code"] == meter
		}
		if !found {
			t.Fatalf("meter list -all: no %s in %v", meter, list.Meters)
		}
		out := c.ok("meter", "list", "-all")
		for _, want := range []string{"CODE", "AGGREGATION", "VALUE PROPERTY", "DIMENSIONS", "EVENT TYPE", "DEFINED AT", meter, "model, region", eventType} {
			if !strings.Contains(out, want) {
				t.Fatalf("meter list printed no %q:\n%s", want, out)
			}
		}
	})

	t.Run("price with a dimension", func(t *testing.T) {
		c := c.with(t)
		c.ok(append(tn, "price", "activate", "-meter", meter, "-currency", "USD", "-unit-price", "0.002")...)
		out := c.ok(append(tn, "price", "activate", "-meter", meter, "-currency", "USD", "-unit-price", "0.03", "-dimension", "model=gpt-4")...)
		if !strings.Contains(out, "model=gpt-4") {
			t.Fatalf("price activate -dimension printed:\n%s", out)
		}
		var prices struct{ Prices []map[string]any }
		c.json(&prices, append(tn, "price", "list", "-meter", meter, "-all")...)
		dims := map[string]string{}
		for _, p := range prices.Prices {
			dims[fmt.Sprint(p["unitPrice"])] = fmt.Sprint(p["dimensions"])
		}
		if len(prices.Prices) != 2 || dims["0.03"] != "map[model:gpt-4]" || dims["0.002"] != "<nil>" {
			t.Fatalf("price list: %v, want 0.002 without dimensions and 0.03 for model=gpt-4", prices.Prices)
		}
		out = c.ok(append(tn, "price", "list", "-meter", meter)...)
		if !strings.Contains(out, "DIMENSIONS") || !strings.Contains(out, "model=gpt-4") {
			t.Fatalf("price list printed:\n%s", out)
		}
	})

	// The facts' time, to the second (a fact may not be in the future).
	at := time.Now().UTC().Truncate(time.Second)
	ts := at.Format(time.RFC3339)
	dir := t.TempDir()

	t.Run("usage send with properties", func(t *testing.T) {
		c := c.with(t)
		// NDJSON: three gpt-4 facts of 10 in eu, without sourceEventId
		// (derived from each line, its properties included).
		var nd strings.Builder
		for range 3 {
			fmt.Fprintf(&nd, `{"meterCode":%q,"quantity":"10","occurredAt":%q,"properties":{"model":"gpt-4","region":"eu"}}`+"\n", meter, ts)
		}
		// CSV: two gpt-3.5 facts of 5 in us, and one without a model.
		csv := fmt.Sprintf("meterCode,quantity,occurredAt,properties.model,properties.region\n%[1]s,5,%[2]s,gpt-3.5,us\n%[1]s,5,%[2]s,gpt-3.5,us\n%[1]s,1,%[2]s,,us\n", meter, ts)
		ndFile, csvFile := filepath.Join(dir, "usage.ndjson"), filepath.Join(dir, "usage.csv")
		for f, body := range map[string]string{ndFile: nd.String(), csvFile: csv} {
			if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Usage learns the catalog meter from meter's MeterDefined: until
		// then unknown_meter. The NDJSON file until every line is taken.
		eventually(t, "usage knowing the catalog meter", func() error {
			if r := c.run("", append(tn, "usage", "send", ndFile)...); r.code != 0 {
				return fmt.Errorf("exit %d: %s%s", r.code, r.out, r.errOut)
			}
			return nil
		})
		var sent cli.SendSummary
		c.json(&sent, append(tn, "usage", "send", ndFile)...)
		if sent.Events != 3 || sent.Replayed != 3 {
			t.Fatalf("usage send of the NDJSON again: %+v, want its 3 events replayed", sent)
		}
		c.json(&sent, append(tn, "usage", "send", csvFile)...)
		if sent.Events != 3 || sent.Accepted != 3 || sent.Refused != 0 {
			t.Fatalf("usage send of the CSV: %+v, want 3 accepted", sent)
		}
		c.json(&sent, append(tn, "usage", "send", csvFile)...)
		if sent.Replayed != 3 {
			t.Fatalf("usage send of the CSV again: %+v, want 3 replayed", sent)
		}
	})

	t.Run("events send", func(t *testing.T) {
		c := c.with(t)
		ev := func(id, typ string, tokens int) string {
			return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"gateway","type":%q,"time":%q,"data":{"tokens":%d,"model":"gpt-4","region":"eu"}}`,
				id, typ, ts, tokens)
		}
		// Event 2, on line 2, has a type no meter takes.
		bad := filepath.Join(dir, "bad.ndjson")
		good := filepath.Join(dir, "events.json")
		if err := os.WriteFile(bad, []byte(ev("ce-1", eventType, 7)+"\n"+ev("ce-2", "com.example.nothing", 1)+"\n"+ev("ce-3", eventType, 7)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(good, []byte("[\n"+ev("ce-1", eventType, 7)+",\n"+ev("ce-3", eventType, 7)+"\n]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := c.run("", append(tn, "events", "send", bad)...)
		if r.code != cli.ExitSomeRefused || !strings.Contains(r.out, "0 sent (new or replayed), 1 refused, 2 not written with them") ||
			!strings.Contains(r.out, "unknown_event_type") || !strings.Contains(r.errOut, "1 of 3 events refused and 2 more not written") {
			t.Fatalf("events send with a bad event: exit %d, want %d\n%s%s", r.code, cli.ExitSomeRefused, r.out, r.errOut)
		}
		var refused cli.EventsSummary
		r = c.run("", append(tn, "events", "send", bad, "-o", "json")...)
		if err := json.Unmarshal([]byte(r.out), &refused); err != nil {
			t.Fatalf("events send -o json: %v\n%s%s", err, r.out, r.errOut)
		}
		if len(refused.RefusedEvents) != 1 {
			t.Fatalf("events send: refused %+v, want one event", refused)
		}
		if e := refused.RefusedEvents[0]; e.Event != 2 || e.Line != 2 || e.ID != "ce-2" || e.Status != 400 || e.Code != "unknown_event_type" {
			t.Fatalf("the refused event: %+v, want event 2 on line 2, ce-2, 400 unknown_event_type", e)
		}
		// Nothing of the refused request was written: its good events, sent
		// as usage facts (CloudEvents' id and source are the fact's
		// identity), are new.
		facts := fmt.Sprintf(`{"sourceSystem":"gateway","sourceEventId":"ce-1","meterCode":%[1]q,"quantity":"7","occurredAt":%[2]q,"properties":{"model":"gpt-4","region":"eu"}}
{"sourceSystem":"gateway","sourceEventId":"ce-3","meterCode":%[1]q,"quantity":"7","occurredAt":%[2]q,"properties":{"model":"gpt-4","region":"eu"}}
`, meter, ts)
		r = c.run(facts, append(tn, "usage", "send", "-")...)
		if r.code != 0 || !strings.Contains(r.out, "2 accepted, 0 replayed, 0 refused") {
			t.Fatalf("the refused request's good events as usage: exit %d, want both new\n%s%s", r.code, r.out, r.errOut)
		}
		// The file without the bad event, a JSON array: sent (replays of
		// the facts just written, not counted twice).
		out := c.ok(append(tn, "events", "send", good)...)
		if !strings.Contains(out, "2 events in 1 requests") || !strings.Contains(out, "2 sent") {
			t.Fatalf("events send printed:\n%s", out)
		}
		// A gateway sends for any tenant: no -tenant, the subject in the
		// event.
		one := filepath.Join(dir, "one.json")
		body := strings.Replace(ev("ce-4", eventType, 3), `"source"`, fmt.Sprintf(`"subject":%q,"source"`, tenant), 1)
		if err := os.WriteFile(one, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		out = c.ok("events", "send", "-platform", one)
		if !strings.Contains(out, "1 sent") {
			t.Fatalf("events send -platform printed:\n%s", out)
		}
		// Without -platform, an ingest token needs the tenant.
		if r := c.run("", "events", "send", one); r.code != cli.ExitUsage || !strings.Contains(r.errOut, "needs -tenant") {
			t.Fatalf("events send without a tenant: exit %d, want %d\n%s%s", r.code, cli.ExitUsage, r.out, r.errOut)
		}
	})

	t.Run("usage query", func(t *testing.T) {
		c := c.with(t)
		from := at.Truncate(24 * time.Hour)
		q := slices.Clip(append(tn, "usage", "query", meter, "-from", from.Format(time.RFC3339), "-to", from.Add(24*time.Hour).Format(time.RFC3339),
			"-window", "day", "-tz", "UTC", "-group-by", "model"))
		// gpt-4: 3 x 10 + 7 + 7 + 3 = 47; gpt-3.5: 5 + 5; no model: 1.
		want := map[string]string{"gpt-4": "47", "gpt-3.5": "10", "<nil>": "1"}
		eventually(t, "the usage by model", func() error {
			var rep struct {
				MeterCode, Aggregation string
				Rows                   []struct {
					Dimensions map[string]*string
					Value      string
				}
			}
			c.json(&rep, q...)
			got := map[string]string{}
			for _, r := range rep.Rows {
				k := "<nil>"
				if v := r.Dimensions["model"]; v != nil {
					k = *v
				}
				got[k] = r.Value
			}
			if rep.MeterCode != meter || rep.Aggregation != "sum" || fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("usage query: %+v, want %s sum by model %v", rep, meter, want)
			}
			return nil
		})
		out := c.ok(q...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 || !strings.Contains(lines[0], meter+": sum per day (UTC)") || strings.Join(strings.Fields(lines[1]), " ") != "FROM TO MODEL VALUE" {
			t.Fatalf("usage query printed:\n%s", out)
		}
		for _, row := range []string{"gpt-4 47", "gpt-3.5 10", "(none) 1"} {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), row) {
				t.Fatalf("usage query printed no row %q:\n%s", row, out)
			}
		}
		// Filtered, two dimensions: only eu's gpt-4.
		out = c.ok(append(q, "-filter", "model:gpt-4", "-filter", "region:eu", "-group-by", "region")...)
		if f := strings.Join(strings.Fields(out), " "); !strings.Contains(f, "FROM TO MODEL REGION VALUE") || !strings.Contains(f, "gpt-4 eu 47") ||
			strings.Contains(f, "gpt-3.5") {
			t.Fatalf("usage query -filter printed:\n%s", out)
		}
		// One row a page: next followed.
		var page struct {
			Rows []map[string]any
			Next string
		}
		c.json(&page, append(q, "-limit", "1")...)
		if len(page.Rows) != 1 || page.Next == "" {
			t.Fatalf("usage query -limit 1: %d rows, next %q", len(page.Rows), page.Next)
		}
		page.Next = ""
		c.json(&page, append(q, "-all")...)
		if len(page.Rows) != 3 || page.Next != "" {
			t.Fatalf("usage query -all: %d rows, next %q; want 3, no next", len(page.Rows), page.Next)
		}
	})

	t.Run("plan publish, subscription start", func(t *testing.T) {
		c := c.with(t)
		code := fmt.Sprintf("pro_%d", n)
		file := filepath.Join(t.TempDir(), "plan.json")
		doc := `{"code":"` + code + `","name":"Pro","currency":"USD","fixedFees":[{"code":"base","name":"Base fee","amount":"49"}],` +
			`"charges":[{"meterCode":"` + meter + `","model":"unit","unitPrice":"0.001"}],"minimumSpend":"100"}`
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		var plan map[string]any
		c.json(&plan, "plan", "publish", file)
		if plan["code"] != code || plan["version"] != 1.0 || plan["minimumSpend"] != "100" {
			t.Fatalf("plan publish: %v", plan)
		}
		if r := c.run(`{"code":"x","nme":"typo"}`, "plan", "publish", "-"); r.code == 0 || !strings.Contains(r.errOut, "not a plan document") {
			t.Fatalf("plan publish of a document off contract: exit %d\n%s%s", r.code, r.out, r.errOut)
		}
		var versions struct{ Versions []map[string]any }
		c.json(&versions, "plan", "versions", code)
		if len(versions.Versions) != 1 {
			t.Fatalf("plan versions: %v", versions.Versions)
		}
		// Billing holds the plan once its PlanPublished arrives.
		var sub map[string]any
		eventually(t, "a subscription to the plan", func() error {
			r := c.run("", append(tn, "subscription", "start", "-plan", code, "-o", "json")...)
			if r.code != 0 {
				return fmt.Errorf("exit %d: %s", r.code, r.errOut)
			}
			return json.Unmarshal([]byte(r.out), &sub)
		})
		if sub["planCode"] != code || sub["subscriptionId"] == nil {
			t.Fatalf("subscription start: %v", sub)
		}
		var subs struct{ Subscriptions []map[string]any }
		c.json(&subs, append(tn, "subscription", "list")...)
		if len(subs.Subscriptions) != 1 || subs.Subscriptions[0]["subscriptionId"] != sub["subscriptionId"] {
			t.Fatalf("subscription list: %v", subs.Subscriptions)
		}
		starts, err := time.Parse(time.RFC3339Nano, sub["startsAt"].(string))
		if err != nil {
			t.Fatal(err)
		}
		endsAt := starts.Add(24 * time.Hour).Format(time.RFC3339)
		var ended map[string]any
		c.json(&ended, append(tn, "subscription", "end", sub["subscriptionId"].(string), "-ends-at", endsAt)...)
		if ended["endsAt"] != endsAt {
			t.Fatalf("subscription end: %v", ended)
		}
	})
}
