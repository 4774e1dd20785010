package system_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// A tenant traces its own invoice on the running system, with its viewer's
// token only: each charge of its line with the fact it rates (properties,
// sourceEventId), its period reconciled by the operator's reconciliation
// restricted to it (a figure corrupted in query's projection of one tenant
// is named for that tenant and not for the other), and a fact sent after
// the tenant closed its period listed late with both periods. Another
// tenant's paths are 403.
func TestTenantTracesItsInvoice(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	period := events.Period(time.Now())
	first, err := events.ParsePeriod(period)
	if err != nil {
		t.Fatal(err)
	}
	next := first.AddDate(0, 1, 0).Format("2006-01")
	type fact struct {
		SourceEventID string            `json:"sourceEventId"`
		Properties    map[string]string `json:"properties"`
	}
	type charge struct {
		EventID          string `json:"eventId"`
		MeterCode        string `json:"meterCode"`
		PriceVersion     int64  `json:"priceVersion"`
		Period           string `json:"period"`
		Late             bool   `json:"late"`
		OccurrencePeriod string `json:"occurrencePeriod"`
		BilledPeriod     string `json:"billedPeriod"`
		Fact             *fact  `json:"fact"`
	}
	type chargePage struct {
		Charges []charge `json:"charges"`
		Next    *string  `json:"next"`
	}
	type recon struct {
		Counts     map[string]int
		Mismatches []struct{ Kind, OriginEventID, Detail string }
	}
	tenants := []string{"acme", "globex"}
	for _, id := range tenants {
		c := auth.Client(auth.DevToken(auth.RoleTenant, id))
		if status, code := call(t, c, "POST", s.URL("meter")+"/v1/tenants/"+id+"/prices",
			map[string]string{"Idempotency-Key": "price-" + id},
			map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.01"}, nil); status != http.StatusCreated {
			t.Fatalf("price of %s: %d %s", id, status, code)
		}
		for _, src := range []string{"req-1", "req-2", "req-3"} {
			servicetest.Eventually(t, id+" "+src+" accepted", time.Minute, func() bool {
				status, code := call(t, c, "POST", s.URL("usage")+"/v1/tenants/"+id+"/usage", nil, map[string]any{
					"sourceSystem": "gateway", "sourceEventId": src, "meterCode": "api_calls", "quantity": "10",
					"occurredAt": time.Now().UTC().Format(time.RFC3339Nano), "properties": map[string]string{"route": "/v1/" + src}}, nil)
				if status != http.StatusCreated && status != http.StatusOK && code != "unknown_meter" && code != "no_price_in_effect" {
					t.Fatalf("usage %s of %s: %d %s", src, id, status, code)
				}
				return status == http.StatusCreated || status == http.StatusOK
			})
		}
	}
	viewer := auth.Client(auth.DevToken(auth.RoleViewer, "acme"))
	q := s.URL("query")

	// The invoice's line, then its charges, two a page, each with its fact.
	servicetest.Eventually(t, "acme's charges projected with their facts", time.Minute, func() bool {
		var pg chargePage
		status, _ := call(t, viewer, "GET", q+"/v1/tenants/acme/periods/"+period+"/charge-facts", nil, nil, &pg)
		if status != 200 || len(pg.Charges) != 3 {
			return false
		}
		for _, c := range pg.Charges {
			if c.Fact == nil {
				return false
			}
		}
		return true
	})
	var line string
	servicetest.Eventually(t, "acme's invoice line of its 3 charges", time.Minute, func() bool {
		var list struct {
			Invoices []struct {
				Lines []struct {
					LineID      string `json:"lineId"`
					ChargeCount int64  `json:"chargeCount"`
				} `json:"lines"`
			} `json:"invoices"`
		}
		call(t, viewer, "GET", s.URL("invoice")+"/v1/tenants/acme/invoices?period="+period, nil, nil, &list)
		for _, inv := range list.Invoices {
			for _, l := range inv.Lines {
				if l.ChargeCount == 3 {
					line = l.LineID
					return true
				}
			}
		}
		return false
	})
	seen := map[string]string{}
	cursor := ""
	for pages := 0; ; pages++ {
		u := q + "/v1/tenants/acme/periods/" + period + "/charge-facts?limit=2&lineId=" + url.QueryEscape(line)
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var pg chargePage
		if status, code := call(t, viewer, "GET", u, nil, nil, &pg); status != 200 || len(pg.Charges) > 2 || pages > 2 {
			t.Fatalf("page %d of %s: %d %s %+v", pages, line, status, code, pg)
		}
		for _, c := range pg.Charges {
			seen[c.Fact.SourceEventID] = c.Fact.Properties["route"]
		}
		if pg.Next == nil {
			break
		}
		cursor = *pg.Next
	}
	for _, src := range []string{"req-1", "req-2", "req-3"} {
		if seen[src] != "/v1/"+src {
			t.Errorf("fact %s of line %s: route %q, want /v1/%s (all: %v)", src, line, seen[src], src, seen)
		}
	}

	reconcile := func(c *http.Client, tenant string) recon {
		var r recon
		if status, code := call(t, c, "GET", q+"/v1/tenants/"+tenant+"/periods/"+period+"/reconciliation", nil, nil, &r); status != 200 {
			t.Fatalf("reconciliation of %s: %d %s", tenant, status, code)
		}
		return r
	}
	viewers := map[string]*http.Client{"acme": viewer, "globex": auth.Client(auth.DevToken(auth.RoleViewer, "globex"))}
	for _, id := range tenants {
		servicetest.Eventually(t, id+" reconciles", time.Minute, func() bool {
			r := reconcile(viewers[id], id)
			return len(r.Mismatches) == 0 && r.Counts["charges"] == 3 && r.Counts["usageFacts"] == 3
		})
	}
	for _, path := range []string{"/periods/" + period + "/reconciliation", "/periods/" + period + "/charge-facts", "/late-usage?period=" + period} {
		if status, code := call(t, viewer, "GET", q+"/v1/tenants/globex"+path, nil, nil, nil); status != http.StatusForbidden || code != "forbidden" {
			t.Errorf("acme's viewer on globex's %s: %d %s, want 403 forbidden", path, status, code)
		}
	}

	// One of acme's charges corrupted in query's projection: acme's
	// reconciliation names it, globex's stays empty.
	var corrupted string
	if err := s.Pool("query").QueryRow(ctx, `UPDATE projected_event SET amount = amount + 1
		WHERE event_id = (SELECT event_id FROM projected_event WHERE tenant_id = 'acme' AND event_type = 'ChargeRated' LIMIT 1)
		RETURNING event_id::text`).Scan(&corrupted); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range reconcile(viewer, "acme").Mismatches {
		found = found || m.Kind == "query_amount_mismatch" && m.OriginEventID == corrupted
	}
	if !found {
		t.Errorf("acme's reconciliation after corrupting the charge of %s: %+v, want query_amount_mismatch", corrupted, reconcile(viewer, "acme"))
	}
	if r := reconcile(viewers["globex"], "globex"); len(r.Mismatches) != 0 {
		t.Errorf("globex's reconciliation after corrupting acme's: %+v, want none", r.Mismatches)
	}

	// acme closes its period; a fact of it sent afterwards is billed late
	// into the next, and the report names both periods.
	admin := auth.Client(auth.DevToken(auth.RoleBillingAdmin, "acme"))
	if status, code := call(t, admin, "POST", s.URL("billing")+"/v1/tenants/acme/periods/"+period+"/close",
		map[string]string{"Idempotency-Key": "close-" + period}, nil, nil); status != http.StatusAccepted {
		t.Fatalf("close %s: %d %s", period, status, code)
	}
	servicetest.Eventually(t, "acme's period closed", time.Minute, func() bool {
		var v struct{ Status string }
		call(t, admin, "GET", s.URL("billing")+"/v1/tenants/acme/periods/"+period, nil, nil, &v)
		return v.Status == "closed"
	})
	ingest := auth.Client(auth.DevToken(auth.RoleIngest, "acme"))
	if status, code := call(t, ingest, "POST", s.URL("usage")+"/v1/tenants/acme/usage", nil, map[string]any{
		"sourceSystem": "gateway", "sourceEventId": "late-1", "meterCode": "api_calls", "quantity": "4",
		"occurredAt": time.Now().UTC().Format(time.RFC3339Nano), "properties": map[string]string{"route": "/v1/late"}}, nil); status != http.StatusCreated {
		t.Fatalf("late usage: %d %s", status, code)
	}
	var late charge
	servicetest.Eventually(t, "the late fact reported", time.Minute, func() bool {
		var pg chargePage
		status, _ := call(t, viewer, "GET", q+"/v1/tenants/acme/late-usage?period="+next, nil, nil, &pg)
		if status != 200 || len(pg.Charges) == 0 {
			return false
		}
		late = pg.Charges[0]
		return true
	})
	if late.Fact == nil || late.Fact.SourceEventID != "late-1" || !late.Late || late.OccurrencePeriod != period ||
		late.BilledPeriod != next || late.Fact.Properties["route"] != "/v1/late" {
		t.Errorf("late fact: %+v (fact %+v), want late-1 occurred in %s, billed in %s", late, late.Fact, period, next)
	}
	var none chargePage
	if status, code := call(t, viewer, "GET", q+"/v1/tenants/acme/late-usage?period="+period, nil, nil, &none); status != 200 || len(none.Charges) != 0 {
		t.Errorf("late usage billed in %s: %d %s %+v, want none", period, status, code, none)
	}
}
