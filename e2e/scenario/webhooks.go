package scenario

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WebhookServiceEnv are the invoice service's webhook settings for a demo
// run: a 2-second request timeout (the default is 10 s) and short backoff,
// so the receiver's faults cost seconds; and the receiver's address,
// http://127.0.0.1, allowed (by default only https to public addresses is).
var WebhookServiceEnv = map[string]string{
	"WEBHOOK_TIMEOUT": "2s", "WEBHOOK_LEASE_TTL": "6s", "WEBHOOK_BACKOFF_BASE": "200ms",
	"WEBHOOK_BACKOFF_MAX": "2s", "WEBHOOK_POLL_INTERVAL": "200ms",
	"WEBHOOK_ALLOW_NETS": "127.0.0.0/8,::1/128", "WEBHOOK_ALLOW_HTTP": "true",
}

// Webhook faults the receiver plays on the first delivery of each key, in
// turn; every later delivery of a key is answered 200.
const (
	FaultNone           = "none"                   // 200 at once
	FaultDown           = "503"                    // the endpoint is down
	FaultThrottle       = "429 Retry-After 1"      // slow down for a second
	FaultTimeoutApplied = "timeout after applying" // the effect happens, the answer comes after the client gave up
)

var faults = []string{FaultDown, FaultThrottle, FaultTimeoutApplied, FaultNone}

// WebhookReceiver is the tenants' webhook endpoint, served by the demo
// process on the loopback address: it verifies every signature as the
// README tells receivers to, dedups on Webhook-Id (one effect per key), and
// plays a fault on each key's first delivery.
type WebhookReceiver struct {
	srv     *http.Server
	url     string
	secrets map[string]string // tenant -> signing secret

	mu         sync.Mutex
	requests   map[string]int    // by tenant
	badSig     map[string]int    // by tenant
	effects    map[string]string // Webhook-Id -> tenant, once applied
	duplicates map[string]int    // by tenant: deliveries of a key already applied
	faulted    map[string]int    // by fault
	seen       map[string]int    // Webhook-Id -> deliveries
	next       int
}

// StartWebhooks serves a receiver on 127.0.0.1 and registers it as a webhook
// endpoint of each tenant (cfg.Tenants, defaulted as Run does) through the
// invoice service's POST /v1/tenants/{t}/webhook-endpoints, keeping each
// secret the answer shows once. Call it before Run: an invoice is told to the
// endpoints registered when it is issued.
func StartWebhooks(ctx context.Context, invoiceURL string, cfg Config) (*WebhookReceiver, error) {
	cfg.defaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	h := &WebhookReceiver{url: "http://" + ln.Addr().String(), secrets: map[string]string{},
		requests: map[string]int{}, badSig: map[string]int{}, effects: map[string]string{},
		duplicates: map[string]int{}, faulted: map[string]int{}, seen: map[string]int{}}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	r := &run{cfg: cfg}
	for _, tenant := range cfg.Tenants {
		var ep struct {
			EndpointID, Secret string
		}
		resp, err := r.call(ctx, http.MethodPost, invoiceURL+"/v1/tenants/"+tenant+"/webhook-endpoints",
			map[string]string{"url": h.url + "/hooks/" + tenant}, nil, &ep)
		if err != nil {
			h.Close()
			return nil, err
		}
		if resp.status != http.StatusCreated || ep.Secret == "" {
			h.Close()
			return nil, fmt.Errorf("register the webhook endpoint of %s: %d %s", tenant, resp.status, resp.body)
		}
		h.secrets[tenant] = ep.Secret
	}
	return h, nil
}

// Close stops the receiver.
func (h *WebhookReceiver) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

func (h *WebhookReceiver) serve(w http.ResponseWriter, r *http.Request) {
	tenant := strings.TrimPrefix(r.URL.Path, "/hooks/")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	key := r.Header.Get("Webhook-Id")
	h.mu.Lock()
	h.requests[tenant]++
	if !VerifyWebhook(h.secrets[tenant], r.Header.Get("Webhook-Timestamp"), r.Header.Get("Webhook-Signature"), body, time.Now()) {
		h.badSig[tenant]++
		h.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	h.seen[key]++
	fault := FaultNone
	if h.seen[key] == 1 {
		fault = faults[h.next%len(faults)]
		h.next++
		h.faulted[fault]++
	}
	h.mu.Unlock()
	switch fault {
	case FaultDown:
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	case FaultThrottle:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case FaultTimeoutApplied:
		h.apply(tenant, key)
		<-r.Context().Done() // answer only after the sender gave up
	default:
		h.apply(tenant, key)
		w.Header().Set("Webhook-Receipt", "demo-"+key)
		w.WriteHeader(http.StatusOK)
	}
}

// apply is the receiver's effect, once per Webhook-Id.
func (h *WebhookReceiver) apply(tenant, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, done := h.effects[key]; done {
		h.duplicates[tenant]++
		return
	}
	h.effects[key] = tenant
}

// Received is what the receiver holds so far: the tenant of every key
// applied, the deliveries of an applied key it absorbed, the deliveries
// with a bad signature, and the first deliveries answered with each fault.
func (h *WebhookReceiver) Received() (effects map[string]string, duplicates, badSignatures int, faulted map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.duplicates {
		duplicates += n
	}
	for _, n := range h.badSig {
		badSignatures += n
	}
	return maps.Clone(h.effects), duplicates, badSignatures, maps.Clone(h.faulted)
}

// VerifyWebhook is what a receiver checks (services/invoice/README.md):
// Webhook-Signature is "v1=" and the hex HMAC-SHA256, keyed with the
// endpoint's secret, of Webhook-Timestamp, ".", and the body as received;
// compared in constant time, the timestamp within five minutes of now.
func VerifyWebhook(secret, timestamp, signature string, body []byte, now time.Time) bool {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "."))
	mac.Write(body)
	return hmac.Equal([]byte(signature), []byte("v1="+hex.EncodeToString(mac.Sum(nil))))
}

// WebhookTenant is what one tenant's endpoint received.
type WebhookTenant struct {
	Tenant     string
	Invoices   int // issued, each to be told once
	Effects    int // keys applied
	Requests   int // deliveries received, faults and redeliveries included
	Duplicates int // deliveries of a key already applied (absorbed)
	BadSig     int
}

// WebhookReport is the receiver's view after every invoice arrived, and the
// operator's view of the intents.
type WebhookReport struct {
	Tenants  []WebhookTenant
	Faults   map[string]int // first deliveries answered with each fault
	Accepted int            // intents accepted, by GET /v1/operator/webhook-intents
	Open     int            // intents pending, leased, failed or expired
	// Problems lists every disagreement: an invoice not told, told twice in
	// effect, a bad signature, a key of no invoice, an intent not accepted.
	Problems []string
}

// Wait waits until every invoice of res reached its tenant's endpoint (key
// inv_<invoiceId>_v1) and every intent is accepted, then reports.
func (h *WebhookReceiver) Wait(ctx context.Context, res *Result, op Operator, wait time.Duration) WebhookReport {
	want := map[string]string{} // key -> tenant
	for _, inv := range res.Invoices {
		want["inv_"+inv.InvoiceID+"_v1"] = inv.Tenant
	}
	rep := WebhookReport{}
	r := &run{cfg: Config{Wait: wait}}
	r.cfg.defaults()
	err := r.waitFor(ctx, "every invoice told to its tenant's webhook endpoint", func() (bool, string, error) {
		accepted, open, err := h.intents(ctx, op)
		if err != nil {
			return false, "", err
		}
		rep.Accepted, rep.Open = accepted, open
		h.mu.Lock()
		defer h.mu.Unlock()
		missing := 0
		for key := range want {
			if _, ok := h.effects[key]; !ok {
				missing++
			}
		}
		return missing == 0 && open == 0, fmt.Sprintf("%d of %d invoices not yet received, %d intents open", missing, len(want), open), nil
	})
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	rep.Faults = map[string]int{}
	for k, v := range h.faulted {
		rep.Faults[k] = v
	}
	invoiceTenant := map[string]string{}
	for _, inv := range res.Invoices {
		invoiceTenant[inv.InvoiceID] = inv.Tenant
	}
	for key, tenant := range h.effects {
		// inv_<invoiceId>_v<n>: the invoice (1) or one of its correction notes.
		id, _, _ := strings.Cut(strings.TrimPrefix(key, "inv_"), "_v")
		if invoiceTenant[id] != tenant {
			rep.Problems = append(rep.Problems, fmt.Sprintf("webhook %s for %s names no invoice of that tenant", key, tenant))
		}
	}
	var tenants []string
	for _, t := range want {
		if !slices.Contains(tenants, t) {
			tenants = append(tenants, t)
		}
	}
	slices.Sort(tenants)
	for _, t := range tenants {
		wt := WebhookTenant{Tenant: t, Requests: h.requests[t], Duplicates: h.duplicates[t], BadSig: h.badSig[t]}
		for key, tenant := range want {
			if tenant == t {
				wt.Invoices++
			}
			if _, ok := h.effects[key]; ok && tenant == t {
				wt.Effects++
			}
		}
		if wt.Effects != wt.Invoices || wt.BadSig != 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("webhooks of %s: %d of %d invoices applied, %d bad signatures",
				t, wt.Effects, wt.Invoices, wt.BadSig))
		}
		rep.Tenants = append(rep.Tenants, wt)
	}
	if rep.Accepted < len(want) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d webhook intents accepted, want at least %d", rep.Accepted, len(want)))
	}
	return rep
}

// intents counts the intents through query's operator API: accepted ones,
// and those not accepted (pending, leased, failed, expired).
func (h *WebhookReceiver) intents(ctx context.Context, op Operator) (accepted, open int, err error) {
	var stats struct {
		ByStatus map[string]int `json:"byStatus"`
	}
	if _, err := op.do(ctx, http.MethodGet, "/v1/operator/webhook-intents/stats", nil, nil, &stats); err != nil {
		return 0, 0, err
	}
	if stats.ByStatus == nil {
		return 0, 0, errors.New("webhook intent stats: no byStatus")
	}
	for status, n := range stats.ByStatus {
		if status == "accepted" {
			accepted = n
		} else {
			open += n
		}
	}
	return accepted, open, nil
}
