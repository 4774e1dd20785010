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

// hookReceiver is a tenant's endpoint: down (503) until up is set, it
// verifies every signature and applies each Webhook-Id's effect once.
type hookReceiver struct {
	mu       sync.Mutex
	secret   string
	up       bool
	requests int
	bad      int
	effects  map[string]int
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
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
	if !h.up {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	h.effects[r.Header.Get("Webhook-Id")] = 1
	w.Header().Set("Webhook-Receipt", "rcpt-1")
}

// An invoice issued while its tenant's endpoint is down: the intent expires
// into the operator's queue (query's view of the invoice service's
// intents), an operator's retry through query is audited like a redrive,
// and the intent is delivered once the endpoint is back.
func TestWebhookIntentExpiredThenRetriedThroughQuery(t *testing.T) {
	for k, v := range map[string]string{"WEBHOOK_TTL": "5s", "WEBHOOK_POLL_INTERVAL": "50ms", "WEBHOOK_BACKOFF_BASE": "100ms",
		"WEBHOOK_BACKOFF_MAX": "500ms", "WEBHOOK_TIMEOUT": "2s", "WEBHOOK_LEASE_TTL": "5s",
		"WEBHOOK_ALLOW_NETS": "127.0.0.0/8", "WEBHOOK_ALLOW_HTTP": "true"} { // the receiver: http://127.0.0.1
		t.Setenv(k, v) // read by the invoice service's Build
	}
	rc := &hookReceiver{effects: map[string]int{}}
	receiver := httptest.NewServer(rc)
	t.Cleanup(receiver.Close)
	s := newStack(t)
	op := auth.Client(mustToken(t, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)))
	acme := auth.Client(auth.DevToken(auth.RoleTenant, "acme"))
	period := events.Period(time.Now())

	var ep struct{ EndpointID, Secret string }
	if status, code := call(t, acme, "POST", s.URL("invoice")+"/v1/tenants/acme/webhook-endpoints", nil,
		map[string]string{"url": receiver.URL + "/billing-events"}, &ep); status != http.StatusCreated {
		t.Fatalf("register endpoint: %d %s", status, code)
	}
	rc.mu.Lock()
	rc.secret = ep.Secret
	rc.mu.Unlock()

	if status, code := call(t, acme, "POST", s.URL("meter")+"/v1/tenants/acme/prices", map[string]string{"Idempotency-Key": "p1"},
		map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.01"}, nil); status != http.StatusCreated {
		t.Fatalf("price: %d %s", status, code)
	}
	servicetest.Eventually(t, "usage accepted", time.Minute, func() bool {
		status, code := call(t, acme, "POST", s.URL("usage")+"/v1/tenants/acme/usage", nil, map[string]string{
			"sourceSystem": "crm", "sourceEventId": "w1", "meterCode": "api_calls", "quantity": "100",
			"occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}, nil)
		if status != http.StatusCreated && code != "unknown_meter" && code != "no_price_in_effect" {
			t.Fatalf("usage: %d %s", status, code)
		}
		return status == http.StatusCreated
	})
	servicetest.Eventually(t, "the charge", time.Minute, func() bool {
		var out struct{ Charges []any }
		status, _ := call(t, acme, "GET", s.URL("billing")+"/v1/tenants/acme/charges?period="+period, nil, nil, &out)
		return status == 200 && len(out.Charges) == 1
	})
	if status, code := call(t, acme, "POST", s.URL("billing")+"/v1/tenants/acme/periods/"+period+"/close",
		map[string]string{"Idempotency-Key": "close-1"}, nil, nil); status != http.StatusAccepted {
		t.Fatalf("close: %d %s", status, code)
	}

	type intent struct {
		IntentID, WebhookID, Status, ResponseRef, LastError string
		Attempts                                            int
	}
	list := func(status string) []intent {
		var out struct{ Items []intent }
		if code, pc := call(t, op, "GET", s.URL("query")+"/v1/operator/webhook-intents?tenantId=acme&status="+status, nil, nil, &out); code != 200 {
			t.Fatalf("list %s intents: %d %s", status, code, pc)
		}
		return out.Items
	}
	servicetest.Eventually(t, "the intent expired into the operator's queue", time.Minute, func() bool { return len(list("expired")) == 1 })
	expired := list("expired")[0]
	if expired.Attempts < 1 || expired.LastError == "" {
		t.Fatalf("expired intent %+v, want tried and refused", expired)
	}
	var stats struct {
		ByStatus map[string]int
	}
	if code, _ := call(t, op, "GET", s.URL("query")+"/v1/operator/webhook-intents/stats", nil, nil, &stats); code != 200 || stats.ByStatus["expired"] != 1 {
		t.Fatalf("stats: %d %+v", code, stats)
	}

	rc.mu.Lock()
	rc.up = true
	rc.mu.Unlock()
	retryURL := s.URL("query") + "/v1/operator/webhook-intents/" + expired.IntentID + "/retry"
	if code, pc := call(t, op, "POST", retryURL, nil, map[string]string{"reason": "endpoint back"}, nil); code != 400 || pc != "missing_correlation_id" {
		t.Fatalf("retry without a correlation id: %d %s", code, pc)
	}
	var res struct{ RedriveID, State, Outcome, IntentStatus string }
	if code, pc := call(t, op, "POST", retryURL, map[string]string{"X-Correlation-Id": "hook-fix-1"},
		map[string]string{"reason": "endpoint back"}, &res); code != 200 || res.Outcome != "rescheduled" || res.State != "completed" {
		t.Fatalf("retry: %d %s %+v", code, pc, res)
	}
	servicetest.Eventually(t, "the intent accepted", time.Minute, func() bool { return len(list("accepted")) == 1 })
	got := list("accepted")[0]
	rc.mu.Lock()
	effects, bad := len(rc.effects), rc.bad
	rc.mu.Unlock()
	if got.WebhookID != expired.WebhookID || got.ResponseRef != "rcpt-1" || effects != 1 || bad != 0 {
		t.Fatalf("accepted %+v (expired as %s), %d effects, %d bad signatures", got, expired.WebhookID, effects, bad)
	}

	var audit struct {
		Service, Action, State string
		Outcome                *string
		Audit                  []struct{ State, Actor, CorrelationID, Reason string }
	}
	if code, _ := call(t, op, "GET", s.URL("query")+"/v1/operator/redrives/"+res.RedriveID, nil, nil, &audit); code != 200 {
		t.Fatalf("audit: %d", code)
	}
	raw, _ := json.Marshal(audit)
	if audit.Service != "invoice" || audit.Action != "retry_webhook_intent" || audit.State != "completed" ||
		audit.Outcome == nil || *audit.Outcome != "rescheduled" || len(audit.Audit) != 2 ||
		audit.Audit[0].Actor != "alice" || audit.Audit[0].CorrelationID != "hook-fix-1" || audit.Audit[0].Reason != "endpoint back" ||
		audit.Audit[1].Actor != "service:invoice" {
		t.Fatalf("audit %s", raw)
	}
	// A second retry finds it accepted: nothing happens, and it is audited too.
	if code, _ := call(t, op, "POST", retryURL, map[string]string{"X-Correlation-Id": "hook-fix-2"},
		map[string]string{"reason": "again"}, &res); code != 200 || res.Outcome != "not_retryable" || res.IntentStatus != "accepted" {
		t.Fatalf("second retry: %d %+v", code, res)
	}
}
