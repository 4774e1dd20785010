package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// X-Correlation-Id follows httpx's one rule: optional, but when sent it is
// 1-128 printable ASCII characters without spaces, or the request is 400
// invalid_correlation_id and writes nothing; a valid one travels on the
// event.
func TestCorrelationID(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := rfc(time.Now().Add(-time.Minute))
	send := func(t *testing.T, path, corr, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
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
	one := usage{SourceSystem: "gw", SourceEventID: "c-1", MeterCode: "api", Quantity: "1", OccurredAt: at}.json(t)
	batch := `{"events":[` + one + `]}`
	for _, corr := range []string{"ticket 42", strings.Repeat("c", 129), "caf\u00e9", "a\tb"} {
		for _, p := range []struct{ path, body string }{{path, one}, {path + ":batch", batch}} {
			status, body := send(t, p.path, corr, p.body)
			if status != http.StatusBadRequest || !hasCode(body, "invalid_correlation_id") {
				t.Fatalf("%s with %q: %d %s, want 400 invalid_correlation_id", p.path, corr, status, body)
			}
		}
	}
	if n := e.written(t); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
	corr := strings.Repeat("c", 127) + "~"
	if status, body := send(t, path, corr, one); status != http.StatusCreated {
		t.Fatalf("valid correlation id: %d %s", status, body)
	}
	if n := e.Count(t, `SELECT count(*) FROM outbox_event WHERE convert_from(envelope, 'UTF8')::jsonb->>'correlationId' = $1`, corr); n != 1 {
		t.Fatalf("%d events carry the correlation id, want 1", n)
	}
}
