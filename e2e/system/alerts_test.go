package system_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// alertHook is a tenant's endpoint that keeps every alert.triggered it
// gets whose signature verifies.
type alertHook struct {
	mu     sync.Mutex
	secret string
	bad    int
	got    []struct {
		ID   string
		Data struct{ AlertID, Period, Kind, MeterCode, Threshold, Value string }
	}
}

func (h *alertHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := r.Header.Get("Webhook-Timestamp")
	mac := hmac.New(sha256.New, []byte(h.secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute ||
		!hmac.Equal([]byte(r.Header.Get("Webhook-Signature")), []byte("v1="+hex.EncodeToString(mac.Sum(nil)))) {
		h.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var b struct {
		ID, Type string
		Data     struct{ AlertID, Period, Kind, MeterCode, Threshold, Value string }
	}
	if json.Unmarshal(body, &b) != nil || b.Type != "alert.triggered" || b.ID != r.Header.Get("Webhook-Id") {
		h.bad++
		http.Error(w, "not an alert", http.StatusBadRequest)
		return
	}
	h.got = append(h.got, struct {
		ID   string
		Data struct{ AlertID, Period, Kind, MeterCode, Threshold, Value string }
	}{b.ID, b.Data})
}

// A tenant's billing-admin defines a usage alert; usage flows through
// meter, usage, billing and invoice; the fact that takes the meter's period
// quantity past the threshold is told once, signed, to the tenant's
// endpoint, and neither a replayed fact nor one more past it tells again.
func TestUsageAlertToldOnceThroughTheStack(t *testing.T) {
	for k, v := range map[string]string{"WEBHOOK_POLL_INTERVAL": "50ms", "WEBHOOK_ALLOW_NETS": "127.0.0.0/8", "WEBHOOK_ALLOW_HTTP": "true"} {
		t.Setenv(k, v) // read by the invoice service's Build
	}
	hook := &alertHook{}
	receiver := httptest.NewServer(hook)
	t.Cleanup(receiver.Close)
	s := newStack(t)
	op := auth.Client(mustToken(t, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)))
	acme := auth.Client(auth.DevToken(auth.RoleTenant, "acme"))
	period := events.Period(time.Now())

	var ep struct{ Secret string }
	if status, code := call(t, acme, "POST", s.URL("invoice")+"/v1/tenants/acme/webhook-endpoints", nil,
		map[string]string{"url": receiver.URL + "/alerts"}, &ep); status != http.StatusCreated {
		t.Fatalf("register endpoint: %d %s", status, code)
	}
	hook.mu.Lock()
	hook.secret = ep.Secret
	hook.mu.Unlock()
	var alert struct{ AlertID string }
	if status, code := call(t, acme, "POST", s.URL("invoice")+"/v1/tenants/acme/alerts", map[string]string{"Idempotency-Key": "a1"},
		map[string]string{"kind": "usage", "meterCode": "api_calls", "threshold": "150"}, &alert); status != http.StatusCreated {
		t.Fatalf("alert: %d %s", status, code)
	}
	if status, code := call(t, acme, "POST", s.URL("meter")+"/v1/tenants/acme/prices", map[string]string{"Idempotency-Key": "p1"},
		map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.01"}, nil); status != http.StatusCreated {
		t.Fatalf("price: %d %s", status, code)
	}
	sent := map[string]string{} // the occurredAt of each fact accepted: its replay sends the same
	send := func(id, quantity string, want int) {
		t.Helper()
		servicetest.Eventually(t, "usage "+id+" accepted", time.Minute, func() bool {
			at, ok := sent[id]
			if !ok {
				at = time.Now().UTC().Format(time.RFC3339Nano)
			}
			status, code := call(t, acme, "POST", s.URL("usage")+"/v1/tenants/acme/usage", nil, map[string]string{
				"sourceSystem": "crm", "sourceEventId": id, "meterCode": "api_calls", "quantity": quantity,
				"occurredAt": at}, nil)
			if status != want && code != "unknown_meter" && code != "no_price_in_effect" {
				t.Fatalf("usage %s: %d %s", id, status, code)
			}
			if status == want {
				sent[id] = at
			}
			return status == want
		})
	}
	// The open invoice's line, as invoice computes it: the signal that
	// invoice has applied the charges.
	invoiced := func(quantity string) func() bool {
		return func() bool {
			var out struct {
				Invoices []struct {
					Lines []struct{ Kind, Quantity string }
				}
			}
			status, _ := call(t, acme, "GET", s.URL("invoice")+"/v1/tenants/acme/invoices?period="+period, nil, nil, &out)
			return status == 200 && len(out.Invoices) == 1 && len(out.Invoices[0].Lines) == 1 && out.Invoices[0].Lines[0].Quantity == quantity
		}
	}
	told := func() int {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		if hook.bad != 0 {
			t.Fatalf("%d deliveries failed the receiver's checks", hook.bad)
		}
		return len(hook.got)
	}
	send("w1", "100", http.StatusCreated)
	servicetest.Eventually(t, "100 invoiced", time.Minute, invoiced("100"))
	send("w2", "60", http.StatusCreated) // 160: past 150
	servicetest.Eventually(t, "the alert told", time.Minute, func() bool { return told() == 1 })
	send("w2", "60", http.StatusOK) // a replay: no new fact
	send("w3", "10", http.StatusCreated)
	servicetest.Eventually(t, "170 invoiced", time.Minute, invoiced("170"))

	type intent struct{ WebhookID, EventType, Status string }
	var intents struct{ Items []intent }
	servicetest.Eventually(t, "every intent of acme accepted", time.Minute, func() bool {
		if code, pc := call(t, op, "GET", s.URL("query")+"/v1/operator/webhook-intents?tenantId=acme", nil, nil, &intents); code != 200 {
			t.Fatalf("list intents: %d %s", code, pc)
		}
		for _, i := range intents.Items {
			if i.Status != "accepted" {
				return false
			}
		}
		return true
	})
	want := intent{WebhookID: "alert_" + alert.AlertID + "_" + period, EventType: "alert.triggered", Status: "accepted"}
	if len(intents.Items) != 1 || intents.Items[0] != want || told() != 1 {
		t.Fatalf("intents %+v and %d deliveries, want one: %+v", intents.Items, told(), want)
	}
	hook.mu.Lock()
	got := hook.got[0]
	hook.mu.Unlock()
	if got.ID != want.WebhookID || got.Data.AlertID != alert.AlertID || got.Data.Period != period || got.Data.Kind != "usage" ||
		got.Data.MeterCode != "api_calls" || got.Data.Threshold != "150" || got.Data.Value != "160" {
		t.Fatalf("alert.triggered %+v", got)
	}
}
