package service

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/faultproxy"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(m))) }

var tmpl = pgtest.Template{Name: "service", Migrate: func(_ context.Context, databaseURL string) error {
	return pgmigrate.Up(databaseURL, outbox.Migrations, inbox.Migrations, idempotency.Migrations)
}}

// testConfig is the configuration's defaults for databaseURL.
func testConfig(t *testing.T, databaseURL string) Config {
	t.Helper()
	cfg, err := LoadConfig(NewEnvFrom(map[string]string{"DATABASE_URL": databaseURL, "AUTH_DEV_KEY": "true"}), "svc", 1)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serveHTTP runs NewHTTPServer(cfg, h) on a free port and returns its address.
func serveHTTP(t *testing.T, cfg Config, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(cfg, h, slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// closedWithin reads conn until the server closes it and returns how long
// that took; it fails the test when the connection is still open after 30 s.
func closedWithin(t *testing.T, conn net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(30 * time.Second))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for 30 s")
	}
	return time.Since(start)
}

// A client that sends its body slowly is cut by the read timeout: the
// handler's body read fails and the connection is closed.
func TestSlowBodyIsCutByTheReadTimeout(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "postgres://unused/x")
	cfg.HTTPReadTimeout, cfg.HTTPReadHeaderTimeout = time.Second, time.Second
	readErr := make(chan error, 1)
	addr := serveHTTP(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		w.WriteHeader(http.StatusBadRequest)
	}))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 200 ms: 1,000 bytes would take 200 s
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if _, err := conn.Write([]byte("a")); err != nil {
				return
			}
		}
	}()
	took := closedWithin(t, conn)
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the handler read the whole slow body")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's body read never ended")
	}
	t.Logf("slow body cut after %v (read timeout 1s)", took)
}

// A client that never finishes its headers is cut too.
func TestStalledHeadersAreCut(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "postgres://unused/x")
	cfg.HTTPReadHeaderTimeout = time.Second
	addr := serveHTTP(t, cfg, http.NotFoundHandler())
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, conn)
}

// An idle keep-alive connection is closed after the idle timeout.
func TestIdleKeepAliveIsClosed(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "postgres://unused/x")
	cfg.HTTPIdleTimeout = time.Second
	addr := serveHTTP(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
	}))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(30 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the server sent bytes on an idle connection")
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the idle keep-alive stayed open for 30 s")
	}
	t.Logf("idle keep-alive closed after %v (idle timeout 1s)", time.Since(start))
}

// A request past its deadline answers 503 timeout as problem+json, also when
// the handler, its query cancelled, writes its own database error.
func TestRequestDeadlineAnswers503Timeout(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	h := httpx.Deadline(300 * time.Millisecond)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fast" {
			httpx.WriteJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
			return
		}
		if _, err := pool.Exec(r.Context(), "SELECT pg_sleep(20)"); err != nil {
			httpx.WriteProblem(w, httpx.StoreError(err))
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"slept": "yes"})
	}))
	start := time.Now()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/slow", nil))
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("answered after %v: the query was not cancelled", took)
	}
	var p httpx.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if rec.Code != http.StatusServiceUnavailable || p.Code != "timeout" ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("answer %d %s %+v, want 503 problem+json timeout", rec.Code, rec.Header().Get("Content-Type"), p)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/fast", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("a fast request answered %d", rec.Code)
	}
	// A handler that writes nothing and returns only past the deadline also
	// answers (this one returns once the deadline has ended its context).
	h = httpx.Deadline(100 * time.Millisecond)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/silent", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"timeout"`) {
		t.Fatalf("silent handler: %d %s", rec.Code, rec.Body)
	}
}

// statement_timeout cancels a long query with a clean error (503 timeout at
// the edge), and the pool goes on working; its connections run with JIT off.
func TestStatementTimeoutCancelsALongQuery(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, pgtest.NewDB(t, tmpl))
	cfg.DBStatementTimeout = 300 * time.Millisecond
	pool, err := OpenPool(t.Context(), cfg, 2, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	start := time.Now()
	_, err = pool.Exec(t.Context(), "SELECT pg_sleep(20)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("err = %v, want query_canceled (57014)", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("cancelled after %v", took)
	}
	if p := httpx.StoreError(err); p.Status != http.StatusServiceUnavailable || p.Code != "timeout" {
		t.Fatalf("StoreError = %+v, want 503 timeout", p)
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the pool after the cancel: %d, %v", n, err)
	}
	var setting string
	if err := pool.QueryRow(t.Context(), "SHOW statement_timeout").Scan(&setting); err != nil || setting != "300ms" {
		t.Fatalf("statement_timeout = %q, %v", setting, err)
	}
	// And the planner settings OpenPool sets (it says why).
	for name, want := range map[string]string{"jit": "off", "random_page_cost": "1.1"} {
		if err := pool.QueryRow(t.Context(), "SHOW "+name).Scan(&setting); err != nil || setting != want {
			t.Fatalf("%s = %q, %v; want %s", name, setting, err, want)
		}
	}
}

// Waiting for a pooled connection ends after DB_ACQUIRE_TIMEOUT.
func TestAcquireTimeout(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, pgtest.NewDB(t, tmpl))
	cfg.DBAcquireTimeout = 300 * time.Millisecond
	pool, err := OpenPool(t.Context(), cfg, 1, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	held, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = pool.Exec(t.Context(), "SELECT 1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the acquire's deadline", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("gave up after %v", took)
	}
	held.Release()
	if _, err := pool.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}

// A pool a burst grew shrinks back: connections idle for DB_CONN_IDLE_TIME
// are closed (pgx's default keeps them 30 minutes).
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, pgtest.NewDB(t, tmpl))
	cfg.DBConnIdleTime = 200 * time.Millisecond
	pool, err := OpenPool(t.Context(), cfg, 3, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var held []*pgxpool.Conn
	for range 3 {
		c, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	if n := pool.Stat().TotalConns(); n != 3 {
		t.Fatalf("%d connections after the burst, want 3", n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for pool.Stat().TotalConns() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections still open 20s after the burst", pool.Stat().TotalConns())
		}
		time.Sleep(50 * time.Millisecond) // polled: pgxpool closes idle connections on its health check, which signals nothing
	}
	if _, err := pool.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}

// /readyz follows the database only: it stays ready with the broker cut
// (reported in /healthz and broker_up, without a raw error), and goes
// unready with the database cut, then ready again.
func TestReadinessFollowsTheDatabaseNotTheBroker(t *testing.T) {
	t.Parallel()
	dbURL, err := url.Parse(pgtest.NewDB(t, tmpl))
	if err != nil {
		t.Fatal(err)
	}
	dbProxy, err := faultproxy.New("db", "127.0.0.1:0", dbURL.Host, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dbProxy.Close()
	kafkaProxy, err := faultproxy.New("kafka", "127.0.0.1:0", kafkatest.Brokers(t)[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kafkaProxy.Close()
	dbURL.Host = dbProxy.Addr()
	cfg := testConfig(t, dbURL.String())
	cfg.Brokers = []string{kafkaProxy.Addr()}
	pool, err := OpenPool(t.Context(), cfg, 2, "http")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	broker := newBrokerHealth(cfg.Brokers, reg, log)
	r := newRouter(Deps{Config: cfg, Logger: log, Pool: pool, Metrics: reg}, reg, broker)
	get := func(path string) (int, map[string]any, string) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		var body map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return rec.Code, body, rec.Body.String()
	}
	brokerOf := func() string {
		_, body, _ := get("/healthz")
		checks, _ := body["checks"].(map[string]any)
		s, _ := checks["broker"].(string)
		return s
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		// Polled: the pool finds the cut or restored database on its next
		// connection, and tells no one.
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 30 s: %s", what)
			}
		}
	}

	broker.probe(t.Context())
	if code, _, _ := get("/readyz"); code != http.StatusOK || brokerOf() != "ok" || testutil.ToFloat64(broker.gauge) != 1 {
		t.Fatalf("healthy: readyz %d, broker %q", code, brokerOf())
	}

	if err := kafkaProxy.Cut(); err != nil {
		t.Fatal(err)
	}
	broker.probe(t.Context())
	code, _, body := get("/readyz")
	if code != http.StatusOK || brokerOf() != "unreachable" || testutil.ToFloat64(broker.gauge) != 0 {
		t.Fatalf("broker cut: readyz %d %s, broker %q, broker_up %v", code, body, brokerOf(), testutil.ToFloat64(broker.gauge))
	}
	_, _, health := get("/healthz")
	if strings.Contains(health, "127.0.0.1") || strings.Contains(health, "dial") || strings.Contains(health, "refused") {
		t.Fatalf("/healthz shows a raw error: %s", health)
	}

	if err := dbProxy.Cut(); err != nil {
		t.Fatal(err)
	}
	eventually("/readyz 503 with the database cut", func() bool { c, _, _ := get("/readyz"); return c == http.StatusServiceUnavailable })
	_, _, body = get("/readyz")
	if !strings.Contains(body, `"unavailable"`) || strings.Contains(body, "127.0.0.1") || strings.Contains(body, "dial") {
		t.Fatalf("unready body %s: want the word, not the error", body)
	}
	if err := dbProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := kafkaProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	eventually("/readyz 200 with the database back", func() bool { c, _, _ := get("/readyz"); return c == http.StatusOK })
	broker.probe(t.Context())
	if brokerOf() != "ok" {
		t.Fatalf("broker back: %q", brokerOf())
	}
}

// METRICS_ADDR moves /metrics off the API port.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "postgres://unused/x")
	cfg.MetricsAddr = "127.0.0.1:0"
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	r := newRouter(Deps{Config: cfg, Logger: log, Metrics: reg}, reg, nil)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))
	if rec.Code == http.StatusOK {
		t.Fatal("/metrics served on the API port with METRICS_ADDR set")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "probe_total", Help: "x"}))
	stop, err := serveMetrics(addr, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "probe_total") {
		t.Fatalf("metrics listener: %d %s", resp.StatusCode, b)
	}
}

// Headers over HTTP_MAX_HEADER_BYTES are refused with 431 problem+json over
// a real connection: the server's own (plain text) limit is above it.
func TestOversizeHeadersAnswerProblemJSON(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "postgres://unused/x")
	addr := serveHTTP(t, cfg, httpx.MaxHeaderBytes(cfg.HTTPMaxHeaderBytes)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/v1/tenants/acme/summary", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("a", cfg.HTTPMaxHeaderBytes+1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(b), `"headers_too_large"`) {
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	req.Header.Set("X-Big", "small")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("small headers: %d", resp.StatusCode)
	}
}
