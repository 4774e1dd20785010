package money

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// Hooks is the tenants' webhook endpoint, an HTTP server on the loopback
// address in the test's process: each tenant registers
// <url>/hooks/<tenant>; the receiver verifies every delivery's signature
// as the invoice service's README tells receivers to (HMAC-SHA256 of
// Webhook-Timestamp "." body with the endpoint's secret, the timestamp
// within five minutes of the wall clock) and keeps every alert.triggered
// delivery, answering 200 at once. Other events (invoice.issued, ...) are
// answered 200 and counted.
type Hooks struct {
	srv *http.Server
	url string

	mu      sync.Mutex
	secrets map[string]string          // tenant -> the endpoint's signing secret
	alerts  map[string][]alertDelivery // tenant -> alert.triggered deliveries, in arrival order
	others  int
	bad     []string // deliveries that failed the receiver's checks, described
}

// alertDelivery is one alert.triggered delivery as received.
type alertDelivery struct {
	WebhookID string
	Data      struct {
		AlertID   string          `json:"alertId"`
		TenantID  string          `json:"tenantId"`
		Period    string          `json:"period"`
		Kind      string          `json:"kind"`
		MeterCode string          `json:"meterCode"`
		Currency  string          `json:"currency"`
		Threshold decimal.Decimal `json:"threshold"`
		Value     decimal.Decimal `json:"value"`
	}
}

// StartHooks serves the receiver on 127.0.0.1 (the invoice service must
// allow it: WEBHOOK_ALLOW_NETS and WEBHOOK_ALLOW_HTTP).
func StartHooks() (*Hooks, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	h := &Hooks{url: "http://" + ln.Addr().String(), secrets: map[string]string{}, alerts: map[string][]alertDelivery{}}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

// Close stops the receiver.
func (h *Hooks) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

// endpoint is tenant's endpoint URL.
func (h *Hooks) endpoint(tenant string) string { return h.url + "/hooks/" + tenant }

func (h *Hooks) setSecret(tenant, secret string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.secrets[tenant] = secret
}

func (h *Hooks) serve(w http.ResponseWriter, r *http.Request) {
	tenant := strings.TrimPrefix(r.URL.Path, "/hooks/")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	id := r.Header.Get("Webhook-Id")
	h.mu.Lock()
	defer h.mu.Unlock()
	if !verify(h.secrets[tenant], r.Header.Get("Webhook-Timestamp"), r.Header.Get("Webhook-Signature"), body, time.Now()) {
		h.bad = append(h.bad, fmt.Sprintf("%s to %s: bad signature", id, tenant))
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var env struct {
		ID       string          `json:"id"`
		Type     string          `json:"type"`
		TenantID string          `json:"tenantId"`
		Data     json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.ID != id || env.TenantID != tenant {
		h.bad = append(h.bad, fmt.Sprintf("%s to %s: body id %q tenant %q (%v)", id, tenant, env.ID, env.TenantID, err))
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if env.Type != "alert.triggered" {
		h.others++
		w.WriteHeader(http.StatusOK)
		return
	}
	d := alertDelivery{WebhookID: id}
	if err := json.Unmarshal(env.Data, &d.Data); err != nil {
		h.bad = append(h.bad, fmt.Sprintf("%s to %s: data %s: %v", id, tenant, clip(string(env.Data)), err))
		http.Error(w, "bad data", http.StatusBadRequest)
		return
	}
	h.alerts[tenant] = append(h.alerts[tenant], d)
	w.WriteHeader(http.StatusOK)
}

// received is a copy of tenant's alert deliveries and every delivery that
// failed the receiver's checks so far.
func (h *Hooks) received(tenant string) ([]alertDelivery, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]alertDelivery(nil), h.alerts[tenant]...), append([]string(nil), h.bad...)
}

// verify is the receiver's check of a delivery (services/invoice/README.md):
// Webhook-Signature is "v1=" and the hex HMAC-SHA256, keyed with the
// endpoint's secret, of Webhook-Timestamp, ".", and the body as received;
// compared in constant time, the timestamp (the sender's wall clock)
// within five minutes of now.
func verify(secret, timestamp, signature string, body []byte, now time.Time) bool {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if secret == "" || err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "."))
	mac.Write(body)
	return hmac.Equal([]byte(signature), []byte("v1="+hex.EncodeToString(mac.Sum(nil))))
}
