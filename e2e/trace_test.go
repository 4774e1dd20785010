package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
	"github.com/usagebilling/billing/pkg/events"
)

// TestOneTraceAcrossTheServices runs the five services as processes with
// tracing on, exporting over OTLP/HTTP to a receiver this test serves on
// 127.0.0.1, and follows one usage fact: the test is the client, so it sends
// the usage POST (and later the period's close) with a traceparent of its
// own trace and then reads every span the processes exported for that trace.
// It checks that one trace id holds the spans of usage (the request, the
// outbox append, the relay's send), billing (the inbox decision, the handler,
// its append and send), query and invoice (their inbox decisions) and, after
// the close, billing's close request and invoice's decision and handler of
// the close, each span's parent the one the design says (decision 0016).
func TestOneTraceAcrossTheServices(t *testing.T) {
	recv := startOTLPReceiver(t)
	urls := startTracedStack(t, map[string]string{
		"CONSUMER_SWEEP_INTERVAL":     "500ms",
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": recv.url,
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
		// The close finishes inside its request once usage's watermarks
		// pass it (decision 0014); one finished later by billing's
		// scheduler has no request, and so no trace, to join.
		"BILLING_CLOSE_WAIT": "2m",
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := tracedClient{authorize: scenario.DevAuthorize()}
	tenant := "trace-" + randomHex(4)

	if status, body := c.do(ctx, http.MethodPost, urls["meter"]+"/v1/tenants/"+tenant+"/prices", "",
		map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.0015"},
		map[string]string{"Idempotency-Key": "price-" + tenant}); status != http.StatusCreated {
		t.Fatalf("activate a price: %d %s", status, body)
	}
	// Usage refuses the fact, writing nothing, until meter's events reach
	// it: unknown_meter before the meter's definition, no_price_in_effect
	// after it but before the tenant's price. Each try is a trace of its
	// own, and the accepted one is the trace followed.
	var traceID, usageRoot string
	for {
		traceID, usageRoot = randomHex(16), randomHex(8)
		status, body := c.do(ctx, http.MethodPost, urls["usage"]+"/v1/tenants/"+tenant+"/usage",
			"00-"+traceID+"-"+usageRoot+"-01",
			map[string]string{"sourceSystem": "trace-test", "sourceEventId": "fact-1", "meterCode": "api_calls",
				"quantity": "3", "occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}, nil)
		if status == http.StatusCreated {
			break
		}
		if !strings.Contains(body, "unknown_meter") && !strings.Contains(body, "no_price_in_effect") {
			t.Fatalf("send the usage fact: %d %s", status, body)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			t.Fatalf("usage never learnt the price: %s", body)
		}
	}
	t.Logf("the usage fact's trace: %s", traceID)

	usageHop := []want{
		{service: "usage", name: "POST /v1/tenants/{tenantId}/usage", kind: tracepb.Span_SPAN_KIND_SERVER, parent: "client:" + usageRoot},
		{service: "usage", name: "outbox append " + events.TopicUsage, kind: tracepb.Span_SPAN_KIND_PRODUCER, parent: "usage/POST /v1/tenants/{tenantId}/usage"},
		{service: "usage", name: "outbox send " + events.TopicUsage, kind: tracepb.Span_SPAN_KIND_PRODUCER, parent: "usage/outbox append " + events.TopicUsage},
		{service: "billing", name: "inbox decide " + events.TypeUsageAccepted, kind: tracepb.Span_SPAN_KIND_CONSUMER, parent: "usage/outbox append " + events.TopicUsage, outcome: "applied"},
		{service: "billing", name: "inbox handle " + events.TypeUsageAccepted, kind: tracepb.Span_SPAN_KIND_INTERNAL, parent: "billing/inbox decide " + events.TypeUsageAccepted},
		{service: "billing", name: "outbox append " + events.TopicBilling, kind: tracepb.Span_SPAN_KIND_PRODUCER, parent: "billing/inbox handle " + events.TypeUsageAccepted},
		{service: "billing", name: "outbox send " + events.TopicBilling, kind: tracepb.Span_SPAN_KIND_PRODUCER, parent: "billing/outbox append " + events.TopicBilling},
		{service: "query", name: "inbox decide " + events.TypeUsageAccepted, kind: tracepb.Span_SPAN_KIND_CONSUMER, parent: "usage/outbox append " + events.TopicUsage, outcome: "applied"},
		{service: "query", name: "inbox decide " + events.TypeChargeRated, kind: tracepb.Span_SPAN_KIND_CONSUMER, parent: "billing/outbox append " + events.TopicBilling, outcome: "applied"},
		{service: "invoice", name: "inbox decide " + events.TypeChargeRated, kind: tracepb.Span_SPAN_KIND_CONSUMER, parent: "billing/outbox append " + events.TopicBilling, outcome: "applied"},
	}
	recv.await(ctx, t, traceID, usageHop)

	// The close, sent as part of the same trace: the client goes on with it.
	closeRoot := randomHex(8)
	period := events.Period(time.Now())
	status, body := c.do(ctx, http.MethodPost, urls["billing"]+"/v1/tenants/"+tenant+"/periods/"+period+"/close",
		"00-"+traceID+"-"+closeRoot+"-01", nil, map[string]string{"Idempotency-Key": "close-" + tenant})
	var closed struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(body), &closed); status != http.StatusAccepted || err != nil || closed.Status != "closed" {
		t.Fatalf("close %s: %d %s; want 202 closed, within the request", period, status, body)
	}
	closeHop := []want{
		{service: "billing", name: "POST /v1/tenants/{tenantId}/periods/{period}/close", kind: tracepb.Span_SPAN_KIND_SERVER, parent: "client:" + closeRoot},
		{service: "billing", name: "outbox append " + events.TopicBilling, kind: tracepb.Span_SPAN_KIND_PRODUCER, parent: "billing/POST /v1/tenants/{tenantId}/periods/{period}/close"},
		{service: "invoice", name: "inbox decide " + events.TypeBillingPeriodClosed, kind: tracepb.Span_SPAN_KIND_CONSUMER, parent: "billing/outbox append " + events.TopicBilling, outcome: "applied"},
		{service: "invoice", name: "inbox handle " + events.TypeBillingPeriodClosed, kind: tracepb.Span_SPAN_KIND_INTERNAL, parent: "invoice/inbox decide " + events.TypeBillingPeriodClosed},
		{service: "invoice", name: "outbox append " + events.TopicInvoice, kind: tracepb.Span_SPAN_KIND_PRODUCER, parent: "invoice/inbox handle " + events.TypeBillingPeriodClosed},
		{service: "invoice", name: "outbox send " + events.TopicInvoice, kind: tracepb.Span_SPAN_KIND_PRODUCER, parent: "invoice/outbox append " + events.TopicInvoice},
		{service: "query", name: "inbox decide " + events.TypeInvoiceIssued, kind: tracepb.Span_SPAN_KIND_CONSUMER, parent: "invoice/outbox append " + events.TopicInvoice, outcome: "applied"},
	}
	spans := recv.await(ctx, t, traceID, append(usageHop, closeHop...))

	// Every span of the trace hangs off another of it, or off the client's.
	ids := map[string]bool{usageRoot: true, closeRoot: true}
	for _, s := range spans {
		ids[s.spanID] = true
	}
	services := map[string]int{}
	for _, s := range spans {
		services[s.service]++
		if !ids[s.parentID] {
			t.Errorf("%s %q has parent %q, not a span of the trace", s.service, s.name, s.parentID)
		}
	}
	t.Logf("trace %s: %d spans, by service %v", traceID, len(spans), services)
	if testing.Verbose() {
		for _, line := range render(spans, usageRoot, closeRoot) {
			t.Log(line)
		}
	}
}

// want is a span the trace must hold: the service (resource service.name),
// its name and kind, and its parent as "<service>/<name>" (one span of the
// trace so named) or "client:<span id>" (the test's own).
type want struct {
	service, name string
	kind          tracepb.Span_SpanKind
	parent        string
	outcome       string // inbox.outcome, for a decision
}

type span struct {
	service, name, spanID, parentID string
	kind                            tracepb.Span_SpanKind
	attrs                           map[string]string
}

// otlpReceiver is an OTLP/HTTP traces endpoint (POST /v1/traces, protobuf)
// keeping every span it receives.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans map[string][]span // by trace id
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{spans: map[string][]span{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP traces request", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range s.GetAttributes() {
					attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
				}
				tid := hex.EncodeToString(s.GetTraceId())
				r.spans[tid] = append(r.spans[tid], span{service: service, name: s.GetName(), kind: s.GetKind(),
					spanID: hex.EncodeToString(s.GetSpanId()), parentID: hex.EncodeToString(s.GetParentSpanId()), attrs: attrs})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// await waits until the trace holds every wanted span, each with its wanted
// parent, and returns the trace's spans; it fails the test with what is
// missing when ctx ends first.
func (r *otlpReceiver) await(ctx context.Context, t *testing.T, traceID string, wants []want) []span {
	t.Helper()
	for {
		r.mu.Lock()
		spans := append([]span(nil), r.spans[traceID]...)
		r.mu.Unlock()
		missing := check(spans, wants)
		if len(missing) == 0 {
			return spans
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			t.Fatalf("trace %s after %d spans:\n  %s\nits spans:\n  %s", traceID, len(spans),
				strings.Join(missing, "\n  "), strings.Join(render(spans), "\n  "))
		}
	}
}

// check returns what of wants spans lacks.
func check(spans []span, wants []want) []string {
	byName := map[string][]span{}
	for _, s := range spans {
		byName[s.service+"/"+s.name] = append(byName[s.service+"/"+s.name], s)
	}
	var missing []string
	for _, w := range wants {
		found := false
		for _, s := range byName[w.service+"/"+w.name] {
			if s.kind != w.kind || (w.outcome != "" && s.attrs["inbox.outcome"] != w.outcome) {
				continue
			}
			if id, ok := strings.CutPrefix(w.parent, "client:"); ok {
				found = found || s.parentID == id
				continue
			}
			for _, p := range byName[w.parent] {
				found = found || s.parentID == p.spanID
			}
		}
		if !found {
			missing = append(missing, fmt.Sprintf("no %s span %q (%s) under %s", w.service, w.name, w.kind, w.parent))
		}
	}
	return missing
}

// render draws the trace as a tree under the client's spans.
func render(spans []span, roots ...string) []string {
	children := map[string][]span{}
	for _, s := range spans {
		children[s.parentID] = append(children[s.parentID], s)
	}
	var lines []string
	var walk func(id string, depth int)
	walk = func(id string, depth int) {
		cs := children[id]
		sort.Slice(cs, func(i, j int) bool { return cs[i].service+cs[i].name < cs[j].service+cs[j].name })
		for _, s := range cs {
			lines = append(lines, fmt.Sprintf("%s%s: %s [%s] %s", strings.Repeat("  ", depth), s.service, s.name,
				strings.TrimPrefix(s.kind.String(), "SPAN_KIND_"), s.attrs["inbox.outcome"]))
			walk(s.spanID, depth+1)
		}
	}
	if len(roots) == 0 {
		ids := map[string]bool{}
		for _, s := range spans {
			ids[s.spanID] = true
		}
		for p := range children {
			if !ids[p] {
				roots = append(roots, p)
			}
		}
	}
	for _, root := range roots {
		lines = append(lines, "client "+root)
		walk(root, 1)
	}
	return lines
}

// startTracedStack starts the five services as processes (the stack
// launcher) with env added to theirs, and returns their base URLs.
func startTracedStack(t *testing.T, env map[string]string) map[string]string {
	t.Helper()
	return stacktest.Start(t, stack.Options{BinDir: stacktest.Binaries(t), Env: env}).URLs()
}

// tracedClient sends JSON requests with a tenant's token and, when given, a
// traceparent header.
type tracedClient struct{ authorize func(tenant string) string }

func (c tracedClient) do(ctx context.Context, method, url, traceparent string, body any, headers map[string]string) (int, string) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err.Error()
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	rest, _ := strings.CutPrefix(req.URL.Path, "/v1/tenants/")
	tenant, _, _ := strings.Cut(rest, "/")
	req.Header.Set("Authorization", c.authorize(tenant))
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
