package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
	"github.com/usagebilling/billing/pkg/events"
)

// Decision 0011, against the running meter, usage and billing (separate
// processes, real PostgreSQL, the embedded Kafka-protocol broker, the fault
// proxies): a fact is rated at the price version in effect at its
// occurrence, as meter's price list finally says, whatever races or cuts
// happen on the way.
func TestPriceInEffectAtOccurrence(t *testing.T) {
	s := startSchedStack(t)
	client := func(t *testing.T) *schedClient {
		return &schedClient{t: t, urls: s.URLs(), auth: scenario.DevAuthorize(), http: &http.Client{Timeout: 30 * time.Second},
			probes: map[string]bool{}, dbs: s.DatabaseURLs()}
	}
	t.Run("activations racing usage", func(t *testing.T) { testActivationsRacingUsage(t, client(t)) })
	t.Run("meter cut off during an activation", func(t *testing.T) { testMeterCutDuringActivation(t, client(t), s) })
	t.Run("graduated and package lines on an issued invoice", func(t *testing.T) { testModelsOnAnInvoice(t, client(t)) })
}

// A graduated and a package price, through usage, billing and invoice: the
// running estimate while the period is open, then an issued invoice whose
// graduated and package lines are each version's pricing over the line's
// quantity (the charges carry no amounts), and a total rounded once.
func testModelsOnAnInvoice(t *testing.T, c *schedClient) {
	const tenant = "models"
	post := func(body map[string]any) schedPrice {
		var p schedPrice
		c.do(http.MethodPost, c.urls["meter"]+"/v1/tenants/"+tenant+"/prices", tenant, body, &p,
			map[string]string{"Idempotency-Key": fmt.Sprintf("models-%d", priceKeys.Add(1))})
		return p
	}
	// 1,000 calls free, then 0.002 up to 10,000 (1.00 on entering), then 0.001.
	callsPrice := post(map[string]any{"meterCode": "api_calls", "currency": "USD", "model": "graduated", "tiers": []map[string]string{
		{"upTo": "1000", "unitPrice": "0"}, {"upTo": "10000", "unitPrice": "0.002", "flatFee": "1"}, {"unitPrice": "0.001"}}})
	// Storage in packages of 100 GB at 2.50, a started package counts.
	gb := post(map[string]any{"meterCode": "storage_gb", "currency": "USD", "model": "package", "packageSize": "100", "packagePrice": "2.50"})
	// The probes and the facts occur once both prices are in effect (each
	// takes effect after its shard's published schedule, up to the lead
	// later): a probe before it is rated unpriced, on a line of its own.
	c.untilInEffect(callsPrice.EffectiveAt)
	c.untilInEffect(gb.EffectiveAt)
	c.waitUsageKnows(tenant, "api_calls")
	c.waitUsageKnows(tenant, "storage_gb")

	now := time.Now().UTC()
	var facts []schedFact
	for i := range 12 { // 12 x 1,000.5 = 12,006 calls
		facts = append(facts, schedFact{SourceSystem: "models", SourceEventID: fmt.Sprintf("calls-%d", i), MeterCode: "api_calls",
			Quantity: "1000.5", OccurredAt: now.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)})
	}
	for i := range 3 { // 3 x 70.25 = 210.75 GB
		facts = append(facts, schedFact{SourceSystem: "models", SourceEventID: fmt.Sprintf("gb-%d", i), MeterCode: "storage_gb",
			Quantity: "70.25", OccurredAt: now.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)})
	}
	c.sendBatch(tenant, facts)
	c.waitCharges(tenant, len(facts), time.Minute)

	// calls: 0 + 9,000 x 0.002 + 1 + 2,006 x 0.001 = 21.006; storage: 3
	// packages x 2.50 = 7.5.
	wantCalls, wantStorage := decimal.RequireFromString("21.006"), decimal.RequireFromString("7.5")
	period := events.Period(now)
	var est struct {
		Period   string                     `json:"period"`
		Status   string                     `json:"status"`
		ClosesAt *time.Time                 `json:"closesAt"`
		Estimate map[string]decimal.Decimal `json:"estimate"`
	}
	c.do(http.MethodGet, c.urls["billing"]+"/v1/tenants/"+tenant+"/periods/"+period, tenant, nil, &est, nil)
	if est.Status != "open" || !est.Estimate["USD"].Equal(wantCalls.Add(wantStorage)) {
		t.Fatalf("estimate %+v, want open and USD %s", est, wantCalls.Add(wantStorage))
	}

	c.do(http.MethodPost, c.urls["billing"]+"/v1/tenants/"+tenant+"/periods/"+period+"/close", tenant, nil, nil,
		map[string]string{"Idempotency-Key": "models-close"})
	type line struct {
		Kind         string          `json:"kind"`
		MeterCode    string          `json:"meterCode"`
		PriceVersion int64           `json:"priceVersion"`
		Quantity     decimal.Decimal `json:"quantity"`
		ChargeCount  int64           `json:"chargeCount"`
		Amount       decimal.Decimal `json:"amount"`
	}
	var inv struct {
		Status   string           `json:"status"`
		Number   int64            `json:"number"`
		Lines    []line           `json:"lines"`
		Subtotal decimal.Decimal  `json:"subtotal"`
		Total    *decimal.Decimal `json:"total"`
	}
	// Polled: the invoice service's answer, once billing's close reached it through Kafka.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		var list struct {
			Invoices []json.RawMessage `json:"invoices"`
		}
		c.do(http.MethodGet, c.urls["invoice"]+"/v1/tenants/"+tenant+"/invoices?period="+period, tenant, nil, &list, nil)
		if len(list.Invoices) == 1 {
			if err := json.Unmarshal(list.Invoices[0], &inv); err != nil {
				t.Fatal(err)
			}
			if inv.Status == "issued" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no issued invoice for %s %s: %d invoices, status %q", tenant, period, len(list.Invoices), inv.Status)
		}
	}
	got := map[string]line{}
	for _, l := range inv.Lines {
		if l.Kind == "charge" {
			got[l.MeterCode] = l
		}
	}
	calls, storage := got["api_calls"], got["storage_gb"]
	// Each line also counts the probe fact of waitUsageKnows (quantity 0).
	if !calls.Quantity.Equal(decimal.RequireFromString("12006")) || calls.ChargeCount != 13 || !calls.Amount.Equal(wantCalls) {
		t.Errorf("graduated line %+v, want 12006 calls in 13 charges for %s", calls, wantCalls)
	}
	if !storage.Quantity.Equal(decimal.RequireFromString("210.75")) || storage.ChargeCount != 4 || !storage.Amount.Equal(wantStorage) {
		t.Errorf("package line %+v, want 210.75 GB in 4 charges for %s", storage, wantStorage)
	}
	if !inv.Subtotal.Equal(wantCalls.Add(wantStorage)) || inv.Total == nil || !inv.Total.Equal(decimal.RequireFromString("28.51")) {
		t.Errorf("invoice subtotal %s total %v, want 28.506 and 28.51", inv.Subtotal, inv.Total)
	}
	t.Logf("invoice %d: graduated line %s calls = %s, package line %s GB = %s, subtotal %s, total %s",
		inv.Number, calls.Quantity, calls.Amount, storage.Quantity, storage.Amount, inv.Subtotal, inv.Total)
}

// startSchedStack starts meter, usage, billing and invoice with a schedule lead of
// 100ms, published every 100ms: shorter than the way from usage to billing
// under load, so many facts reach billing beyond the schedule it knows and
// wait for a watermark (the path the race must get right), and activations
// without effectiveAt take effect about 100ms after they are answered,
// while usage that occurred then is in flight.
func startSchedStack(t *testing.T) *stack.Stack {
	t.Helper()
	return stacktest.Start(t, stack.Options{
		BinDir:   stacktest.Binaries(t),
		Services: []string{"meter", "usage", "billing", "invoice"},
		Env: map[string]string{"CONSUMER_SWEEP_INTERVAL": "500ms", "METER_SCHEDULE_LEAD": "100ms",
			"METER_WATERMARK_INTERVAL": "100ms"},
	})
}

// Prices are activated without effectiveAt every 100ms while two clients
// send usage that occurred "now", so facts and activations meet in the same
// milliseconds: every charge must carry the version in effect at its fact's
// occurrence.
func testActivationsRacingUsage(t *testing.T, c *schedClient) {
	const tenant, meter = "race", "api_calls"
	c.activate(tenant, meter, "0.001", "")
	c.waitUsageKnows(tenant, meter)

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var activations atomic.Int64
	wg.Go(func() {
		for i := 2; ctx.Err() == nil; i++ {
			c.activate(tenant, meter, fmt.Sprintf("0.%03d", i), "")
			activations.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	var mu sync.Mutex
	occurred := map[string]time.Time{} // UsageAccepted event id -> occurredAt
	for w := range 2 {
		wg.Go(func() {
			for b := 0; ctx.Err() == nil; b++ {
				facts := make([]schedFact, 50)
				for i := range facts {
					facts[i] = schedFact{SourceSystem: "race", SourceEventID: fmt.Sprintf("w%d-%d-%d", w, b, i), MeterCode: meter,
						Quantity: "1", OccurredAt: time.Now().UTC().Format(time.RFC3339Nano)}
				}
				ids := c.sendBatch(tenant, facts)
				mu.Lock()
				for i, id := range ids {
					at, _ := time.Parse(time.RFC3339Nano, facts[i].OccurredAt)
					occurred[id] = at
				}
				mu.Unlock()
				time.Sleep(60 * time.Millisecond) // deliberate: spaced batches, so versions activate between them
			}
		})
	}
	// The race runs until it is big enough to prove something (at least
	// 1,000 facts sent and 10 versions activated meanwhile, about 4 s on an
	// idle machine), not for a fixed time: a loaded machine sends less per
	// second, and a race cut short by the clock proves nothing.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		sent := len(occurred)
		mu.Unlock()
		if sent >= 1100 && activations.Load() >= 10 {
			break
		}
	}
	stop()
	wg.Wait()

	charges := c.waitCharges(tenant, len(occurred), time.Minute)
	schedule := c.schedule(tenant, meter)
	mispriced, crossing := 0, 0
	for _, ch := range charges {
		at, ok := occurred[ch.UsageEventID]
		if !ok {
			t.Fatalf("charge %s rates usage %s, which was not sent", ch.ChargeID, ch.UsageEventID)
		}
		want := schedule.at(at)
		if ch.PriceVersion != want.Version || !ch.UnitPrice.Equal(want.UnitPrice) {
			mispriced++
			if mispriced <= 5 {
				t.Errorf("usage %s occurred at %s: charged v%d at %s, in effect then v%d at %s", ch.UsageEventID,
					at.Format(time.RFC3339Nano), ch.PriceVersion, ch.UnitPrice, want.Version, want.UnitPrice)
			}
		}
		if schedule.nearChange(at, 50*time.Millisecond) {
			crossing++
		}
	}
	deferred := c.deferredTotal()
	t.Logf("%d facts, %d price versions (%d activated while usage was sent), %d facts within 50ms of a version change, "+
		"%d deferrals by billing while they raced, %d mispriced", len(charges), len(schedule), activations.Load(), crossing, deferred, mispriced)
	if len(charges) < 1000 || len(schedule) < 10 || crossing == 0 {
		t.Fatalf("the race was too small to prove anything: %d facts, %d versions, %d near a change", len(charges), len(schedule), crossing)
	}
}

// Meter's database path is cut right after an activation answers: meter
// can neither publish the activation (if its relay had not yet) nor any
// watermark, while usage keeps flowing to billing. Billing rates what it
// knows the schedule for, keeps the rest waiting (deferred, as the
// recovery counts show), and prices it at the right version once the path
// is back.
func testMeterCutDuringActivation(t *testing.T, c *schedClient, s *stack.Stack) {
	const tenant, meter = "cut", "api_calls"
	v1 := c.activate(tenant, meter, "0.5", "")
	c.waitUsageKnows(tenant, meter)

	v2 := c.activate(tenant, meter, "0.75", "")
	proxy := s.Proxy(stack.ProxyDB("meter"))
	if err := proxy.Cut(); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			_ = proxy.Restore()
		}
	}()
	// Under v1, around v2, and past any watermark meter published.
	var facts []schedFact
	for i, at := range []time.Time{v1.EffectiveAt.Add(time.Millisecond), v2.EffectiveAt.Add(-time.Microsecond), v2.EffectiveAt,
		v2.EffectiveAt.Add(time.Millisecond), v2.EffectiveAt.Add(3 * time.Second), v2.EffectiveAt.Add(8 * time.Second)} {
		for j := range 10 {
			facts = append(facts, schedFact{SourceSystem: "cut", SourceEventID: fmt.Sprintf("f%d-%d", i, j), MeterCode: meter,
				Quantity: "2", OccurredAt: at.Add(time.Duration(j) * time.Microsecond).Format(time.RFC3339Nano)})
		}
	}
	ids := c.sendBatch(tenant, facts)

	// While meter is cut off, facts beyond the schedule billing knows wait.
	var waiting int64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		rec, err := scenario.ReadRecovery(t.Context(), s.DatabaseURL("billing"))
		if err != nil {
			t.Fatal(err)
		}
		if waiting = rec.Deferred; waiting >= 20 {
			break
		}
		time.Sleep(200 * time.Millisecond) // polled: billing's recovery counts, from its database
	}
	time.Sleep(2 * time.Second) // longer than the lead: without watermarks, nothing more is known
	rec, err := scenario.ReadRecovery(t.Context(), s.DatabaseURL("billing"))
	if err != nil {
		t.Fatal(err)
	}
	rated := len(c.charges(tenant))
	t.Logf("meter cut off: billing rated %d of %d facts, %d wait (deferred in billing's recovery counts)", rated, len(facts), rec.Deferred)
	if rec.Deferred < 20 || rated+int(rec.Deferred) < len(facts) {
		t.Fatalf("with meter cut off, want the 20 facts past any watermark waiting: rated %d, deferred %d", rated, rec.Deferred)
	}

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	restored = true
	charges := c.waitCharges(tenant, len(facts), time.Minute)
	schedule := c.schedule(tenant, meter)
	occurred := map[string]time.Time{}
	for i, id := range ids {
		occurred[id], _ = time.Parse(time.RFC3339Nano, facts[i].OccurredAt)
	}
	for _, ch := range charges {
		want := schedule.at(occurred[ch.UsageEventID])
		if ch.PriceVersion != want.Version || !ch.UnitPrice.Equal(want.UnitPrice) {
			t.Errorf("usage %s occurred at %s: charged v%d, in effect then v%d", ch.UsageEventID,
				occurred[ch.UsageEventID].Format(time.RFC3339Nano), ch.PriceVersion, want.Version)
		}
	}
	if _, err := scenario.WaitRecovered(t.Context(), map[string]string{"billing": s.DatabaseURL("billing")}, 30*time.Second, t.Logf); err != nil {
		t.Fatal(err)
	}
}

// deferredTotal reads billing's count of deferred decisions from its
// metrics (every deferral, also of facts decided again later).
func (c *schedClient) deferredTotal() int {
	c.t.Helper()
	resp, err := c.http.Get(c.urls["billing"] + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "inbox_decisions_total{") && strings.Contains(line, `outcome="deferred"`) {
			var v float64
			if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err == nil {
				total += v
			}
		}
	}
	return int(total)
}

type schedClient struct {
	t      *testing.T
	urls   map[string]string
	auth   func(tenant string) string
	http   *http.Client
	probes map[string]bool   // event ids of waitUsageKnows's facts
	dbs    map[string]string // each service's database, for what a stall waits on
}

type schedPrice struct {
	Version     int64           `json:"version"`
	UnitPrice   decimal.Decimal `json:"unitPrice"`
	EffectiveAt time.Time       `json:"effectiveAt"`
}

type schedFact struct {
	SourceSystem  string `json:"sourceSystem"`
	SourceEventID string `json:"sourceEventId"`
	MeterCode     string `json:"meterCode"`
	Quantity      string `json:"quantity"`
	OccurredAt    string `json:"occurredAt"`
}

type schedCharge struct {
	ChargeID     string          `json:"chargeId"`
	UsageEventID string          `json:"usageEventId"`
	UnitPrice    decimal.Decimal `json:"unitPrice"`
	PriceVersion int64           `json:"priceVersion"`
}

func (c *schedClient) do(method, url, tenant string, body, out any, header map[string]string) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", c.auth(tenant))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, url, err, raw)
		}
	}
	if resp.StatusCode >= 300 && out != nil {
		c.t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

var priceKeys atomic.Int64

func (c *schedClient) activate(tenant, meter, unitPrice, effectiveAt string) schedPrice {
	c.t.Helper()
	body := map[string]string{"meterCode": meter, "currency": "USD", "unitPrice": unitPrice}
	if effectiveAt != "" {
		body["effectiveAt"] = effectiveAt
	}
	var p schedPrice
	key := fmt.Sprintf("sched-%d", priceKeys.Add(1))
	c.do(http.MethodPost, c.urls["meter"]+"/v1/tenants/"+tenant+"/prices", tenant, body, &p, map[string]string{"Idempotency-Key": key})
	return p
}

// untilInEffect waits until at, when a price activated without effectiveAt
// takes effect (right after its tenant's published schedule, decision
// 0019): facts occurring from then on are priced by it.
func (c *schedClient) untilInEffect(at time.Time) {
	time.Sleep(time.Until(at) + time.Millisecond) // deliberate: a wall-clock time, the price's effective time
}

// waitUsageKnows waits until usage has the meter's price evidence: a probe
// fact is accepted (its charge is left out of charges).
func (c *schedClient) waitUsageKnows(tenant, meter string) {
	c.t.Helper()
	// Polled: usage learns the price through Kafka and tells the client nothing.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		f := schedFact{SourceSystem: "probe", SourceEventID: "probe-" + meter, MeterCode: meter, Quantity: "0",
			OccurredAt: time.Now().UTC().Format(time.RFC3339Nano)}
		var out struct {
			Results []struct {
				Status  int    `json:"status"`
				EventID string `json:"eventId"`
			} `json:"results"`
		}
		c.do(http.MethodPost, c.urls["usage"]+"/v1/tenants/"+tenant+"/usage:batch", tenant, map[string]any{"events": []schedFact{f}}, &out, nil)
		if r := out.Results[0]; r.Status < 300 {
			c.probes[r.EventID] = true
			return
		}
	}
	c.t.Fatalf("usage never learnt the price of %s for %s", meter, tenant)
}

// sendBatch sends facts in one batch and returns their UsageAccepted event
// ids; every fact must be accepted.
func (c *schedClient) sendBatch(tenant string, facts []schedFact) []string {
	c.t.Helper()
	var out struct {
		Results []struct {
			Status  int    `json:"status"`
			EventID string `json:"eventId"`
			Code    string `json:"code"`
		} `json:"results"`
	}
	c.do(http.MethodPost, c.urls["usage"]+"/v1/tenants/"+tenant+"/usage:batch", tenant, map[string]any{"events": facts}, &out, nil)
	ids := make([]string, len(facts))
	for i, r := range out.Results {
		if r.Status != http.StatusCreated {
			c.t.Fatalf("fact %s: status %d %s", facts[i].SourceEventID, r.Status, r.Code)
		}
		ids[i] = r.EventID
	}
	return ids
}

// charges lists the tenant's charges of this period and the next (facts a
// few seconds ahead may cross a month's end).
func (c *schedClient) charges(tenant string) []schedCharge {
	c.t.Helper()
	var all []schedCharge
	now := time.Now().UTC()
	for _, period := range []string{events.Period(now), events.Period(now.AddDate(0, 0, 1))} {
		cursor := ""
		for {
			var page struct {
				Charges []schedCharge `json:"charges"`
				Next    string        `json:"next"`
			}
			url := c.urls["billing"] + "/v1/tenants/" + tenant + "/charges?limit=1000&period=" + period
			if cursor != "" {
				url += "&cursor=" + cursor
			}
			c.do(http.MethodGet, url, tenant, nil, &page, nil)
			all = append(all, page.Charges...)
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if events.Period(now) == events.Period(now.AddDate(0, 0, 1)) {
			break
		}
	}
	out := all[:0]
	for _, ch := range all {
		if !c.probes[ch.UsageEventID] {
			out = append(out, ch)
		}
	}
	return out
}

// waitChargesCap bounds any wait for charges, however slowly they come.
const waitChargesCap = 10 * time.Minute

// waitCharges waits until the tenant has at least n charges. It gives up
// only when the count has not grown for stall, or after waitChargesCap: how
// long billing takes on a shared, loaded machine is not what these tests
// check, whether it gets there is.
func (c *schedClient) waitCharges(tenant string, n int, stall time.Duration) []schedCharge {
	c.t.Helper()
	began, last, moved := time.Now(), -1, time.Now()
	for {
		got := c.charges(tenant)
		if len(got) >= n {
			if waited := time.Since(began); waited > 10*time.Second {
				c.t.Logf("%d charges of %s after %s", len(got), tenant, waited.Round(time.Millisecond))
			}
			return got
		}
		if len(got) > last {
			last, moved = len(got), time.Now()
		} else if time.Since(moved) > stall || time.Since(began) > waitChargesCap {
			c.t.Fatalf("%d charges of %s, want %d: none new for %s (waited %s of at most %s)\n%s", len(got), tenant, n,
				time.Since(moved).Round(time.Millisecond), time.Since(began).Round(time.Millisecond), waitChargesCap, c.waiting(tenant))
		}
		time.Sleep(250 * time.Millisecond) // polled: billing's charges over HTTP
	}
}

// waiting says what billing's deferred events of tenant wait for, what
// billing and meter know of the tenant's schedules, and the versions billing
// holds: what a stalled wait for charges is stuck on.
func (c *schedClient) waiting(tenant string) string {
	var b strings.Builder
	dump := func(service, title, sql string) {
		url, ok := c.dbs[service]
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", title, err)
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, sql, tenant)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", title, err)
			return
		}
		defer rows.Close()
		fmt.Fprintf(&b, "%s (%s):\n", title, service)
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, "  %v\n", err)
				return
			}
			fmt.Fprintf(&b, "  %v\n", vals)
		}
	}
	dump("billing", "deferred: event type, wait key (second cut), count, oldest, attempts, next attempt in", `
		SELECT event_type, regexp_replace(wait_key, '@[0-9]+$', '@<second>'), count(*), min(first_seen),
		       max(attempts), min(next_attempt) - now()
		FROM inbox_deferred WHERE tenant_id = $1 GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 20`)
	dump("billing", "known schedule", `SELECT shard, contiguous_seq, known_through, updated_at, now() FROM schedule_shard WHERE $1::text <> ''`)
	dump("billing", "versions held", `SELECT meter_code, currency, max(version), count(*) FROM price_evidence WHERE tenant_id = $1 GROUP BY 1, 2`)
	dump("meter", "published schedule", `SELECT shard, last_seq, known_through, now() FROM schedule_shard WHERE $1::text <> ''`)
	return b.String()
}

// priceSchedule is a series' versions as meter lists them.
type priceSchedule []schedPrice

func (c *schedClient) schedule(tenant, meter string) priceSchedule {
	c.t.Helper()
	var out priceSchedule
	cursor := ""
	for {
		var page struct {
			Prices []schedPrice `json:"prices"`
			Next   string       `json:"next"`
		}
		url := c.urls["meter"] + "/v1/tenants/" + tenant + "/prices?limit=1000&meterCode=" + meter
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		c.do(http.MethodGet, url, tenant, nil, &page, nil)
		out = append(out, page.Prices...)
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// at is the version in effect at t: the highest version whose effectiveAt
// is not after t.
func (s priceSchedule) at(t time.Time) schedPrice {
	var in schedPrice
	for _, p := range s {
		if !p.EffectiveAt.After(t) {
			in = p
		}
	}
	return in
}

// nearChange reports whether t is within d of a version's effectiveAt.
func (s priceSchedule) nearChange(t time.Time, d time.Duration) bool {
	for _, p := range s[1:] {
		if diff := t.Sub(p.EffectiveAt); diff > -d && diff < d {
			return true
		}
	}
	return false
}
