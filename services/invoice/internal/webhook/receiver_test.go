package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/services/invoice/internal/webhook"
)

// delivery is one request a receiver got.
type delivery struct {
	key      string
	at       time.Time
	verified bool
	body     []byte
}

// receiver is a tenant's endpoint: a real HTTP server that verifies each
// request's signature as services/invoice/README.md tells receivers to, and
// applies each Webhook-Id's effect once (receiver-side dedup). behave picks
// the answer to the n-th request (from 1) of a key; nil answers 200.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    []delivery
	effect map[string]int // applied effects by Webhook-Id
	seen   map[string]int // requests by Webhook-Id
	behave func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{effect: map[string]int{}, seen: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Webhook-Id")
	rc.mu.Lock()
	ok := verify(rc.secret, r.Header.Get("Webhook-Timestamp"), r.Header.Get("Webhook-Signature"), body, time.Now())
	rc.got = append(rc.got, delivery{key: key, at: time.Now(), verified: ok, body: body})
	rc.seen[key]++
	n := rc.seen[key]
	behave := rc.behave
	rc.mu.Unlock()
	if !ok {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	apply := func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.effect[key] == 0 { // dedup on Webhook-Id: one effect per key
			rc.effect[key] = 1
		}
	}
	if behave != nil && behave(w, r, n, apply) {
		return
	}
	apply()
	w.Header().Set("Webhook-Receipt", "rcpt-"+key)
	w.WriteHeader(http.StatusOK)
}

// verify is the receiver's check, written from the README and not from
// webhook.Sign: HMAC-SHA256 keyed with the secret over "<timestamp>.<body>",
// hex, after "v1=", compared in constant time; the timestamp within five
// minutes of now.
func verify(secret, timestamp, signature string, body []byte, now time.Time) bool {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "."))
	mac.Write(body)
	want := "v1=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(signature), []byte(want))
}

func (rc *receiver) setBehaviour(f func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.behave = f
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

func (rc *receiver) effects() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]int, len(rc.effect))
	for k, v := range rc.effect {
		out[k] = v
	}
	return out
}

// register makes rc an endpoint of tenant.
func (rc *receiver) register(t *testing.T, pool *pgxpool.Pool, tenant string) webhook.Endpoint {
	t.Helper()
	ep, err := testEndpoints(pool).Create(t.Context(), tenant, rc.srv.URL+"/hooks/invoices", "test")
	if err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	rc.secret = ep.Secret
	rc.mu.Unlock()
	return ep
}

// testConfig is a quick worker: short timeout, lease and backoff; the
// receivers' http://127.0.0.1 allowed.
func testConfig() webhook.Config {
	c := webhook.DefaultConfig()
	c.PollInterval, c.Timeout, c.LeaseTTL = 20*time.Millisecond, 2*time.Second, 4*time.Second
	c.BackoffBase, c.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	c.AllowNets, c.AllowHTTP = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, true
	c.SecretKeys = testKeys
	return c
}

// testKeys seal the secrets of every test's endpoints.
var testKeys = mustKeys("test-1:" + strings.Repeat("A", 43) + "=")

func mustKeys(list ...string) *webhook.SecretKeys {
	k, err := webhook.ParseSecretKeys(list)
	if err != nil {
		panic(err)
	}
	return k
}

// testEndpoints are the endpoint commands with testConfig's policy.
func testEndpoints(pool *pgxpool.Pool) *webhook.Endpoints {
	return webhook.NewEndpoints(pool, 10, webhook.NewEgress(testConfig(), nil), testConfig().SecretKeys)
}

// runWorker runs a worker until the test ends (or stop is called).
func runWorker(t *testing.T, pool *pgxpool.Pool, cfg webhook.Config, setup ...func(*webhook.Worker)) (stop func()) {
	t.Helper()
	return runWorkerWith(t, pool, cfg, nil, setup...)
}

// runWorkerWith is runWorker with the worker's metrics registered in reg.
func runWorkerWith(t *testing.T, pool *pgxpool.Pool, cfg webhook.Config, reg prometheus.Registerer, setup ...func(*webhook.Worker)) (stop func()) {
	t.Helper()
	w, err := webhook.NewWorker(pool, cfg, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline (never a timed assertion: only a bound on a hang).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		// Polled: the worker records each result in the database and
		// tells no one.
		time.Sleep(20 * time.Millisecond)
	}
}
