package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/usagebilling/billing/pkg/pgsession"
)

// OpenPool opens a pool of at most maxConns connections to the service's
// database, every connection with the statement_timeout of
// cfg.DBStatementTimeout, and every acquire bounded by cfg.DBAcquireTimeout
// (ended sooner by its context). A connection idle for cfg.DBConnIdleTime
// is closed at the next health check, at most a minute later (pgx's
// default keeps one 30 minutes, so a pool grown by a burst
// stayed grown for half an hour). name labels the pool in the logs
// (application_name). Every connection runs in the services' session
// (pgsession.Configure: binary codecs and planner settings).
func OpenPool(ctx context.Context, cfg Config, maxConns int, name string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = int32(maxConns)
	if cfg.DBConnIdleTime > 0 {
		pcfg.MaxConnIdleTime = cfg.DBConnIdleTime
		pcfg.HealthCheckPeriod = min(pcfg.HealthCheckPeriod, cfg.DBConnIdleTime)
	}
	if cfg.DBStatementTimeout > 0 {
		pcfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.DBStatementTimeout.Milliseconds(), 10)
	}
	pgsession.Configure(pcfg)
	if _, set := pcfg.ConnConfig.RuntimeParams["application_name"]; !set {
		pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.Name + "-" + name
	}
	if cfg.DBAcquireTimeout > 0 && pcfg.ConnConfig.Tracer == nil {
		pcfg.ConnConfig.Tracer = acquireTimeout(cfg.DBAcquireTimeout)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool %s: %w", name, err)
	}
	return pool, nil
}

// acquireTimeout bounds how long Acquire waits for a connection: pgxpool
// acquires with the context its tracer returns, and ends the trace when the
// acquire is over (where the timer is released).
type acquireTimeout time.Duration

type cancelKey struct{}

func (d acquireTimeout) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(d))
	return context.WithValue(ctx, cancelKey{}, cancel)
}

func (acquireTimeout) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

func (acquireTimeout) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (acquireTimeout) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// brokerHealth probes the brokers periodically and remembers the result, for
// /healthz and the broker_up gauge. It never makes the service unready: the
// outbox holds what cannot be published while the broker is away.
type brokerHealth struct {
	brokers []string
	up      atomic.Bool
	checked atomic.Bool
	gauge   prometheus.Gauge
	log     *slog.Logger
}

func newBrokerHealth(brokers []string, reg prometheus.Registerer, log *slog.Logger) *brokerHealth {
	h := &brokerHealth{brokers: brokers, log: log, gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "broker_up",
		Help: "1 when the last probe reached a Kafka broker over TCP, else 0 (probed every 5s; readiness does not depend on it).",
	})}
	if reg != nil {
		_ = reg.Register(h.gauge)
	}
	return h
}

// probe dials the brokers once and records the outcome.
func (h *brokerHealth) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := brokerReachable(ctx, h.brokers)
	was := h.up.Load()
	h.up.Store(err == nil)
	first := !h.checked.Swap(true)
	if err == nil {
		h.gauge.Set(1)
		if !was && !first {
			h.log.Info("broker reachable again")
		}
		return
	}
	h.gauge.Set(0)
	if was || first {
		h.log.Warn("broker unreachable; the outbox holds what cannot be published", "err", err)
	}
}

func (h *brokerHealth) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		h.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// status is what /healthz shows for the broker: "ok", "unreachable" or
// "unknown" (not probed yet).
func (h *brokerHealth) status() string {
	switch {
	case h == nil || !h.checked.Load():
		return "unknown"
	case h.up.Load():
		return "ok"
	default:
		return "unreachable"
	}
}

func brokerReachable(ctx context.Context, brokers []string) error {
	var d net.Dialer
	var last error
	for _, b := range brokers {
		c, err := d.DialContext(ctx, "tcp", b)
		if err == nil {
			_ = c.Close()
			return nil
		}
		last = err
	}
	return fmt.Errorf("no broker reachable: %w", last)
}

// serveMetrics serves /metrics on a listener of its own (METRICS_ADDR) and
// returns the function that stops it.
func serveMetrics(addr string, metrics prometheus.Gatherer, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on METRICS_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics on their own listener", "metrics", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// NewHTTPServer returns the API server with the limits of cfg. Its own
// header limit is a backstop above HTTP_MAX_HEADER_BYTES (at least 1 MiB,
// net/http's default): the router refuses headers over the setting with a
// problem (httpx.MaxHeaderBytes); only past the backstop does net/http answer
// 431 itself, in plain text.
func NewHTTPServer(cfg Config, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Addr: cfg.HTTPAddr, Handler: h,
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    max(2*cfg.HTTPMaxHeaderBytes, http.DefaultMaxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}
