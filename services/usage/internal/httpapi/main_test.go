package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type env struct {
	*usagetest.Env
	srv *httptest.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := usagetest.New(t)
	srv := httptest.NewServer(apitest.Handler(t, usageapi.YAML(), e.Router))
	t.Cleanup(srv.Close)
	return &env{Env: e, srv: srv}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(t *testing.T, method, path, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

type accepted struct {
	UsageID      string `json:"usageId"`
	EventID      string `json:"eventId"`
	PriceVersion int64  `json:"priceVersion"`
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// usage renders a usage request body.
type usage struct {
	SourceSystem  string `json:"sourceSystem,omitempty"`
	SourceEventID string `json:"sourceEventId,omitempty"`
	MeterCode     string `json:"meterCode,omitempty"`
	Quantity      any    `json:"quantity,omitempty"`
	OccurredAt    string `json:"occurredAt,omitempty"`
	Currency      string `json:"currency,omitempty"`
}

func (u usage) json(t *testing.T) string {
	t.Helper()
	b, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hasCode reports whether a problem body carries code.
func hasCode(body, code string) bool { return strings.Contains(body, `"code":"`+code+`"`) }

// written counts the rows an accepted usage fact writes.
func (e *env) written(t *testing.T) int {
	t.Helper()
	return e.Count(t, `SELECT (SELECT count(*) FROM usage_fact) + (SELECT count(*) FROM outbox_event)`)
}
