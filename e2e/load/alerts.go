package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// AlertTarget is the bound on the alerts' latency: the commit of the charge
// that crosses a threshold to the first delivery attempt of its
// alert.triggered, p99, at 1,000 facts/s (docs/measured.md).
const AlertTarget = 2 * time.Second

// AlertWait bounds the wait, after the drain, for the last crossings'
// webhooks.
const AlertWait = time.Minute

// alertWatch is -alerts: a webhook receiver on 127.0.0.1 registered as an
// endpoint of every tenant, and usage alerts on the load's meter at
// AlertStep, 2 x AlertStep, ... per tenant. Each alert.triggered delivery
// is timed from the crossing (the body's data.at: the invoice service's
// clock inside the transaction that applied the crossing charges, just
// before its commit) to its arrival here (the first attempt's, on this
// machine's clock: the stack and the load tool share one).
type alertWatch struct {
	cfg       *Config
	srv       *http.Server
	url       string
	step      int64
	endpoints map[string]string // endpoint id by tenant

	mu     sync.Mutex
	first  map[string]time.Duration // by Webhook-Id: arrival - data.at of the first delivery
	copies map[string]int           // by Webhook-Id: deliveries
	others int                      // deliveries of other types (the invoices of -close)
	bad    []string
}

// AlertStats is the report of -alerts.
type AlertStats struct {
	PerTenant  int      `json:"alertsPerTenant"`
	Step       int64    `json:"thresholdStep"`
	Expected   int      `json:"crossingsExpected"`
	Told       int      `json:"told"`
	ToldAgain  int      `json:"deliveredAgain"` // at least once: a Webhook-Id delivered more than once
	Unexpected int      `json:"unexpected"`     // told though its threshold was not reached
	P50        float64  `json:"p50Seconds"`
	P95        float64  `json:"p95Seconds"`
	P99        float64  `json:"p99Seconds"`
	Max        float64  `json:"maxSeconds"`
	Problems   []string `json:"problems,omitempty"`
}

// alertStep is the quantity between two thresholds of a tenant: what the
// tenant is expected to send over the run divided by one more than the
// alerts, so the last one is crossed near the end; 1,000 when flat out.
func alertStep(cfg *Config, weight float64) int64 {
	if cfg.AlertStep > 0 {
		return cfg.AlertStep
	}
	var expected float64
	switch {
	case cfg.Facts > 0:
		expected = float64(cfg.Facts) * weight
	case cfg.Rate > 0:
		expected = cfg.Rate * cfg.Duration.Seconds() * weight
	default:
		return 1000
	}
	return max(1, int64(expected/float64(cfg.Alerts+1)))
}

// setupAlerts starts the receiver, registers it with every tenant and
// defines the alerts.
func setupAlerts(ctx context.Context, cfg *Config, cl *client, progress func(string, ...any)) (*alertWatch, error) {
	w := &alertWatch{cfg: cfg, endpoints: map[string]string{}, first: map[string]time.Duration{}, copies: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("-alerts: listen for the webhooks: %w", err)
	}
	w.url = "http://" + ln.Addr().String() + "/alerts"
	w.srv = &http.Server{Handler: http.HandlerFunc(w.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()
	// The smallest tenant's step: every tenant gets the same thresholds.
	weights := cfg.Weights()
	w.step = alertStep(cfg, min(weights[0], weights[len(weights)-1]))
	progress("-alerts: %d usage alert(s) per tenant on %s every %d facts; webhooks to %s", cfg.Alerts, cfg.MeterCode, w.step, w.url)
	for _, t := range cfg.TenantIDs {
		a, err := cl.do(ctx, http.MethodPost, "invoice", t, "/v1/tenants/"+t+"/webhook-endpoints", nil, map[string]string{"url": w.url})
		if err != nil {
			w.stop()
			return nil, fmt.Errorf("-alerts: register the receiver for tenant %s: %w", t, err)
		}
		if a.status != http.StatusCreated {
			w.stop()
			return nil, fmt.Errorf("-alerts: register the receiver for tenant %s (the invoice service needs WEBHOOK_ALLOW_NETS=127.0.0.0/8 and WEBHOOK_ALLOW_HTTP=true): %s", t, a)
		}
		var ep struct {
			EndpointID string `json:"endpointId"`
		}
		_ = json.Unmarshal(a.body, &ep)
		w.endpoints[t] = ep.EndpointID
		for k := 1; k <= cfg.Alerts; k++ {
			body := map[string]string{"kind": "usage", "meterCode": cfg.MeterCode, "threshold": fmt.Sprint(int64(k) * w.step)}
			key := map[string]string{"Idempotency-Key": fmt.Sprintf("%s-alert-%d", cfg.RunID, k)}
			a, err := cl.do(ctx, http.MethodPost, "invoice", t, "/v1/tenants/"+t+"/alerts", key, body)
			if err != nil || (a.status != http.StatusCreated) {
				w.stop()
				return nil, fmt.Errorf("-alerts: define alert %d of tenant %s: %v %s", k, t, err, a)
			}
		}
	}
	return w, nil
}

func (w *alertWatch) serve(rw http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	raw, _ := io.ReadAll(r.Body)
	var b struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			At        time.Time       `json:"at"`
			Threshold decimal.Decimal `json:"threshold"`
			Value     decimal.Decimal `json:"value"`
		} `json:"data"`
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rw.WriteHeader(http.StatusOK)
	if err := json.Unmarshal(raw, &b); err != nil {
		w.bad = append(w.bad, fmt.Sprintf("a delivery that is not JSON: %v", err))
		return
	}
	if b.Type != "alert.triggered" {
		w.others++
		return
	}
	if b.Data.Value.LessThan(b.Data.Threshold) {
		w.bad = append(w.bad, fmt.Sprintf("%s told at %s, below its threshold %s", b.ID, b.Data.Value, b.Data.Threshold))
	}
	w.copies[b.ID]++
	if _, ok := w.first[b.ID]; !ok {
		w.first[b.ID] = arrived.Sub(b.Data.At)
	}
}

// collect waits (up to wait) for the crossings that reached holds
// (each tenant's meter quantity: its facts accepted, probes included) and
// returns the figures.
func (w *alertWatch) collect(ctx context.Context, reached []int64, wait time.Duration) *AlertStats {
	s := &AlertStats{PerTenant: w.cfg.Alerts, Step: w.step}
	for _, n := range reached {
		s.Expected += int(min(int64(w.cfg.Alerts), n/w.step))
	}
	deadline := time.Now().Add(wait)
	for {
		w.mu.Lock()
		n := len(w.first)
		w.mu.Unlock()
		if n >= s.Expected || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // polled: the receiver records deliveries as they come
	}
	w.mu.Lock()
	samples := make([]Sample, 0, len(w.first))
	for id, d := range w.first {
		samples = append(samples, Sample{Value: d.Seconds(), Weight: 1})
		if w.copies[id] > 1 {
			s.ToldAgain++
		}
	}
	s.Told = len(w.first)
	s.Problems = append(s.Problems, w.bad...)
	w.mu.Unlock()
	if ps, ok := Percentiles(samples, 50, 95, 99, 100); ok {
		s.P50, s.P95, s.P99, s.Max = ps[0], ps[1], ps[2], ps[3]
	}
	if s.Told < s.Expected {
		s.Problems = append(s.Problems, fmt.Sprintf("%d of %d crossings not told within %s of the drain", s.Expected-s.Told, s.Expected, wait))
	}
	if s.Told > s.Expected {
		s.Unexpected = s.Told - s.Expected
		s.Problems = append(s.Problems, fmt.Sprintf("%d alert(s) told beyond the %d thresholds reached", s.Unexpected, s.Expected))
	}
	return s
}

// finish deletes the receiver's endpoints (their later deliveries would fail)
// and stops it.
func (w *alertWatch) finish(ctx context.Context, cl *client) {
	for t, id := range w.endpoints {
		if id != "" {
			_, _ = cl.do(ctx, http.MethodDelete, "invoice", t, "/v1/tenants/"+t+"/webhook-endpoints/"+id, nil, nil)
		}
	}
	w.stop()
}

func (w *alertWatch) stop() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(sctx)
}

// writeAlerts writes the section of -alerts.
func (r *Report) writeAlerts(w io.Writer) {
	a := r.Alerts
	if a == nil {
		return
	}
	tw := textSection(w, "Alerts (-alerts): commit of the charge that crosses a threshold -> first delivery of its alert.triggered")
	fmt.Fprintf(tw, "alerts per tenant\t%d, every %d facts\n", a.PerTenant, a.Step)
	fmt.Fprintf(tw, "crossings\t%d reached, %d told, %d delivered again (at least once)\n", a.Expected, a.Told, a.ToldAgain)
	verdict := "met"
	if a.P99 > AlertTarget.Seconds() {
		verdict = "MISSED"
	}
	fmt.Fprintf(tw, "latency\tp50 %s  p95 %s  p99 %s  max %s (target p99 <= %s: %s)\n", ms(a.P50), ms(a.P95), ms(a.P99), ms(a.Max), AlertTarget, verdict)
	if len(a.Problems) > 0 {
		fmt.Fprintf(tw, "problems\t%s\n", strings.Join(a.Problems, "; "))
	}
	tw.Flush()
}
