package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// X-Correlation-Id follows httpx's one rule: optional, but when sent it is
// 1-128 printable ASCII characters without spaces, or the activation is
// 400 invalid_correlation_id and writes nothing; a valid one travels on the
// event.
func TestCorrelationID(t *testing.T) {
	e := newEnv(t)
	send := func(t *testing.T, key, corr string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/tenants/t1/prices",
			strings.NewReader(`{"meterCode":"m","currency":"USD","unitPrice":"1"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Correlation-Id", corr)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	for _, corr := range []string{"ticket 42", strings.Repeat("c", 129), "caf\u00e9", "a\tb"} {
		status, body := send(t, "k-bad", corr)
		if status != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_correlation_id"`) {
			t.Fatalf("%q: %d %s, want 400 invalid_correlation_id", corr, status, body)
		}
	}
	if n := written(t, e.pool); n != 0 {
		t.Fatalf("refused activations wrote %d rows", n)
	}
	corr := "incident-42"
	if status, body := send(t, "k-1", corr); status != http.StatusCreated {
		t.Fatalf("valid correlation id: %d %s", status, body)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM outbox_event WHERE convert_from(envelope, 'UTF8')::jsonb->>'correlationId' = $1`, corr); n != 2 {
		t.Fatalf("%d events carry the correlation id, want 2 (the price's and its implied meter's)", n)
	}
}
