package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	"github.com/usagebilling/billing/services/query/internal/operator"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// A retry of an intent the invoice service does not know is 404
// webhook_intent_not_found, and nothing is audited; so are the inputs a
// hostile client tried (control characters in the reason or the actor,
// other UUID spellings). The invoice service is a stand-in: it knows one
// intent, and (as it did before) answers a retry of any other 200
// not_found.
func TestWebhookRetryOfAnUnknownIntentWritesNothing(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	known := uuid.New()
	var retries int
	invoice := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/internal/v1/webhook-intents/"+known.String():
			_, _ = io.WriteString(w, `{"intentId":"`+known.String()+`","status":"failed"}`)
		case r.Method == http.MethodGet:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"type":"x","title":"Not Found","status":404,"code":"webhook_intent_not_found","detail":"no webhook intent with that id"}`)
		case strings.HasSuffix(r.URL.Path, "/retry"):
			retries++
			id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/internal/v1/webhook-intents/"), "/retry")
			outcome, status := "not_found", ""
			if id == known.String() {
				outcome, status = "rescheduled", "pending"
			}
			_, _ = io.WriteString(w, `{"intentId":"`+id+`","outcome":"`+outcome+`","status":"`+status+`"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(invoice.Close)
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, log))
	httpapi.NewWebhookOperator(operator.NewWebhooks(pool, invoice.URL, keys, log), log).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, queryapi.YAML(), r))
	t.Cleanup(srv.Close)
	mallory := auth.Client(mustToken(auth.NewClaims("mal\u0007lory", auth.RoleOperator, "", time.Hour)))

	retryURL := func(id string) string { return srv.URL + "/v1/operator/webhook-intents/" + id + "/retry" }
	for _, c := range []struct {
		name, id, body string
		client         *http.Client
		status         int
		code           string
	}{
		{"unknown intent", uuid.NewString(), `{"reason":"r"}`, alice, 404, "webhook_intent_not_found"},
		{"reason with BEL", known.String(), `{"reason":"r\u0007"}`, alice, 400, "control_character"},
		{"reason with ESC", known.String(), `{"reason":"\u001b[2Jr"}`, alice, 400, "control_character"},
		{"actor with BEL", known.String(), `{"reason":"r"}`, mallory, 400, "control_character"},
		{"nil intent id", uuid.Nil.String(), `{"reason":"r"}`, alice, 400, "invalid_intent_id"},
		{"braced intent id", "%7B" + known.String() + "%7D", `{"reason":"r"}`, alice, 400, "invalid_intent_id"},
		{"bare intent id", strings.ReplaceAll(known.String(), "-", ""), `{"reason":"r"}`, alice, 400, "invalid_intent_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, code := call(t, c.client, "POST", retryURL(c.id), "corr-1", c.body, nil)
			if status != c.status || code != c.code {
				t.Fatalf("%d %s, want %d %s", status, code, c.status, c.code)
			}
		})
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM redrive_audit`).Scan(&n); err != nil || n != 0 || retries != 0 {
		t.Fatalf("%d audit rows written, %d retries asked (%v), want none", n, retries, err)
	}
	// The known intent is retried and audited as before.
	var res struct{ Outcome string }
	if status, code := call(t, alice, "POST", retryURL(known.String()), "corr-2", `{"reason":"endpoint fixed"}`, &res); status != 200 || res.Outcome != "rescheduled" {
		t.Fatalf("retry of a known intent: %d %s %+v", status, code, res)
	}
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM redrive_audit`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d audit rows after a retry (%v), want requested and completed", n, err)
	}
}
