package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
)

// The plan story's alert: told when the tenant's requests of the period
// reach what the plan includes (DESIGN.md section 3a, alerts).
const planAlertKind = "usage"

// AlertResult is what the plan story saw of its alert and of the tenant's
// trace of its invoice line.
type AlertResult struct {
	AlertID, WebhookID string
	Threshold          decimal.Decimal
	// Deliveries of the alert's Webhook-Id the receiver got (all with a
	// good signature), and the figure the first told.
	Deliveries, BadSignatures int
	Value                     decimal.Decimal
	// The tenant's viewer token traced the invoice's charge line to these
	// facts (their sourceEventIds), over Pages pages; Quantity their sum.
	Traced   []string
	Pages    int
	Quantity decimal.Decimal
}

// alertReceiver is the story tenant's webhook endpoint: it verifies each
// delivery's signature and counts the deliveries of each Webhook-Id.
type alertReceiver struct {
	srv    *http.Server
	url    string
	secret string

	mu         sync.Mutex
	deliveries map[string]int
	bodies     map[string][]byte
	bad        int
}

func (h *alertReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	h.mu.Lock()
	defer h.mu.Unlock()
	if !VerifyWebhook(h.secret, r.Header.Get("Webhook-Timestamp"), r.Header.Get("Webhook-Signature"), body, time.Now()) {
		h.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	key := r.Header.Get("Webhook-Id")
	h.deliveries[key]++
	if h.bodies[key] == nil {
		h.bodies[key] = body
	}
	w.WriteHeader(http.StatusOK)
}

func (h *alertReceiver) seen(key string) (n, bad int, body []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deliveries[key], h.bad, h.bodies[key]
}

func (h *alertReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

// planAlert serves the tenant's webhook endpoint on the loopback address,
// registers it, and creates a usage alert at the plan's included requests,
// before any usage: the invoice service tells it once, when the period's
// requests reach it.
func (r *run) planAlert(ctx context.Context, res *PlanResult) (*alertReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("alert receiver: %w", err)
	}
	h := &alertReceiver{url: "http://" + ln.Addr().String() + "/hooks", deliveries: map[string]int{}, bodies: map[string][]byte{}}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	var ep struct{ Secret string }
	resp, err := r.call(ctx, http.MethodPost, r.ep.Invoice+"/v1/tenants/"+res.Tenant+"/webhook-endpoints",
		map[string]string{"url": h.url}, nil, &ep)
	if err == nil && (resp.status != http.StatusCreated || ep.Secret == "") {
		err = fmt.Errorf("register %s's webhook endpoint: %d %s", res.Tenant, resp.status, resp.body)
	}
	if err != nil {
		h.close()
		return nil, err
	}
	h.secret = ep.Secret
	var alert struct {
		AlertID   string          `json:"alertId"`
		Threshold decimal.Decimal `json:"threshold"`
	}
	resp, err = r.call(ctx, http.MethodPost, r.ep.Invoice+"/v1/tenants/"+res.Tenant+"/alerts",
		map[string]string{"kind": planAlertKind, "meterCode": PlanMeter, "threshold": PlanIncluded.String()},
		map[string]string{"Idempotency-Key": "alert-" + res.Tenant}, &alert)
	if err == nil && (resp.status != http.StatusCreated || alert.AlertID == "") {
		err = fmt.Errorf("create %s's alert: %d %s", res.Tenant, resp.status, resp.body)
	}
	if err != nil {
		h.close()
		return nil, err
	}
	res.Alert.AlertID, res.Alert.Threshold = alert.AlertID, alert.Threshold
	res.Alert.WebhookID = "alert_" + alert.AlertID + "_" + res.Period
	r.cfg.Progress("plan story: %s asked to be told when its %s of %s reach %s (alert %s)", res.Tenant, PlanMeter, res.Period,
		PlanIncluded, tail(alert.AlertID))
	return h, nil
}

// checkAlert waits for the alert's webhook, then, once the invoice is
// issued (every charge of the period applied), checks it came once, for
// the period, with a figure at or past the threshold.
func (r *run) checkAlert(ctx context.Context, res *PlanResult, h *alertReceiver, issued bool) error {
	a := &res.Alert
	err := r.waitFor(ctx, "the alert of "+res.Tenant, func() (bool, string, error) {
		n, _, _ := h.seen(a.WebhookID)
		return n > 0, "not told yet", nil
	})
	if err != nil || !issued {
		return err
	}
	n, bad, body := h.seen(a.WebhookID)
	a.Deliveries, a.BadSignatures = n, bad
	var msg struct {
		Type string `json:"type"`
		Data struct {
			AlertID string          `json:"alertId"`
			Period  string          `json:"period"`
			Value   decimal.Decimal `json:"value"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		return fmt.Errorf("the alert's webhook body %q: %w", body, err)
	}
	a.Value = msg.Data.Value
	if n != 1 || bad != 0 || msg.Type != "alert.triggered" || msg.Data.AlertID != a.AlertID || msg.Data.Period != res.Period ||
		msg.Data.Value.LessThan(a.Threshold) {
		r.mismatch("%s's alert: %d deliveries (%d bad signatures), %s of %s for %s at %s, want one alert.triggered of %s at >= %s",
			res.Tenant, n, bad, msg.Type, msg.Data.AlertID, msg.Data.Period, msg.Data.Value, res.Period, a.Threshold)
	}
	return nil
}

// traceLine follows the issued invoice's charge line to its facts with a
// token of the tenant's viewer role alone, page by page (query's
// charge-facts), and checks they are the facts the story sent.
func (r *run) traceLine(ctx context.Context, res *PlanResult, lineID string, sent []string) error {
	tok, err := auth.TokenFromEnv("viewer@"+res.Tenant, auth.RoleViewer, res.Tenant)
	if err != nil {
		return err
	}
	a := &res.Alert
	trace := func() error {
		a.Traced, a.Pages, a.Quantity = nil, 0, decimal.Zero
		cursor := ""
		for {
			q := url.Values{"lineId": {lineID}, "limit": {"4"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			var page struct {
				Charges []struct {
					Fact *struct {
						SourceEventID string          `json:"sourceEventId"`
						Quantity      decimal.Decimal `json:"quantity"`
					} `json:"fact"`
				} `json:"charges"`
				Next string `json:"next"`
			}
			resp, err := r.call(ctx, http.MethodGet, r.ep.Query+"/v1/tenants/"+res.Tenant+"/periods/"+res.Period+"/charge-facts?"+q.Encode(),
				nil, map[string]string{"Authorization": "Bearer " + tok}, &page)
			if err != nil {
				return err
			}
			if resp.status != http.StatusOK {
				return fmt.Errorf("trace %s's line %s: %d %s", res.Tenant, lineID, resp.status, resp.body)
			}
			a.Pages++
			for _, c := range page.Charges {
				if c.Fact != nil { // null while query has not projected the fact yet
					a.Traced = append(a.Traced, c.Fact.SourceEventID)
					a.Quantity = a.Quantity.Add(c.Fact.Quantity)
				}
			}
			if cursor = page.Next; cursor == "" {
				return nil
			}
		}
	}
	err = r.waitFor(ctx, "query to show "+res.Tenant+"'s facts of the line", func() (bool, string, error) {
		err := trace()
		return len(a.Traced) >= len(sent), fmt.Sprintf("%d/%d facts", len(a.Traced), len(sent)), err
	})
	if err != nil {
		return err
	}
	slices.Sort(a.Traced)
	want := slices.Sorted(slices.Values(sent))
	if !slices.Equal(a.Traced, want) || !a.Quantity.Equal(res.Quantity) {
		r.mismatch("%s traced line %s to %v (quantity %s), want %v (%s)", res.Tenant, lineID, a.Traced, a.Quantity, want, res.Quantity)
	}
	r.cfg.Progress("plan story: %s's viewer traced the invoice's charge line to its %d facts over %d pages (quantity %s)",
		res.Tenant, len(a.Traced), a.Pages, a.Quantity)
	return nil
}
