// Package service is the process around each service's domain: configuration
// from the environment, JSON logs, a `migrate` subcommand run as the schema
// owner (migrations at start only when the service itself runs as the
// owner; see prepareSchema), the PostgreSQL pool, the HTTP server with
// /healthz, /readyz and /metrics, the outbox relay, the inbox consumer, and a graceful shutdown that
// stops taking requests, drains the consumer and the relay, then closes the
// pool. A service's main is one call to Main.
//
// Every service also gets the operator machinery of package ops without
// writing any of it: each new quarantine is announced as EventQuarantined on
// ops.events.v1 through the outbox, RedriveRequested commands addressed to
// the service on ops.commands.v1 are acted on and answered with
// RedriveCompleted, and the read-only internal endpoints (/internal/v1/...)
// serve its recovery counts, quarantine, dead letters and reconciliation
// rows. Every route but /healthz, /readyz and /metrics is behind the bearer
// token policy of package auth.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/pkg/tracing"
)

// Deps is what a service's build function gets.
type Deps struct {
	Config   Config // Config.Auth signs the service's calls to others
	Logger   *slog.Logger
	Pool     *pgxpool.Pool
	Metrics  prometheus.Registerer
	Registry *envelope.Registry // the event contract (schema version 1) and Spec.Register's additions
}

// Parts is what a service contributes.
type Parts struct {
	// Routes mounts the service's HTTP API. Every route is behind the access
	// policy of auth.RuleFor.
	Routes func(r chi.Router)
	// Topics and Handlers: the events the service consumes. Every service
	// also consumes ops.commands.v1 (RedriveRequested, handled by ops), so
	// these are only the service's own.
	Topics   []string
	Handlers map[string]inbox.Handler
	// BatchHandlers apply event types set-wise (inbox.BatchHandler); a type
	// has a handler or a batch handler, not both.
	BatchHandlers map[string]inbox.BatchHandler
	// Reconciliation are the sets the service serves at
	// GET /internal/v1/reconciliation/{set} (nil: none).
	Reconciliation recon.Sets
	// Work, when set, runs beside the relay and the consumer until its
	// context ends at shutdown, before the pool closes (a periodic job).
	Work func(ctx context.Context) error
}

// Spec describes a service to Main.
type Spec struct {
	Name        string
	DefaultPort int
	// Migrations are the service's own schema sets; the outbox, inbox and
	// idempotency schemas are applied before them.
	Migrations []pgmigrate.Set
	Build      func(ctx context.Context, d Deps) (Parts, error)
	// Register, when set, registers decoders and upcasters beyond the
	// contract's schema version 1 (a new schema version of an event), before
	// Build and before anything is consumed.
	Register func(r *envelope.Registry)
	// OriginConstraints are the unique constraints guarding the origin
	// event of the service's business effects (inbox.Options): a handler's
	// unique violation on one of them is a DUPLICATE, on any other a
	// Permanent error. Empty: every unique violation is a DUPLICATE.
	OriginConstraints []string
	// MonthTables are the service's own tables partitioned by month of
	// their UUIDv7 key (pkg/monthpart): the retention creates their months
	// ahead, as inbox_event's, at start and each RETENTION_INTERVAL.
	MonthTables []monthpart.Table
}

// Sets returns every migration set of a service, shared ones first.
func (s Spec) Sets() []pgmigrate.Set {
	return append([]pgmigrate.Set{outbox.Migrations, inbox.Migrations, idempotency.Migrations}, s.Migrations...)
}

// gcPercent is the garbage collector's target when GOGC is not set: the
// heap may grow to five times what is live between collections instead of
// twice. A service's live heap is a few batches and caches (tens of MB). At
// Go's 100 the collector took 13-21% of every service's CPU under load; 200
// took 18% off the services' CPU per fact (docs/cpu-per-fact.md, step 9),
// and 400 about 8% more, for 25-45% more resident memory (step 13).
const gcPercent = 400

// defaultGC sets gcPercent unless the environment sets GOGC.
func defaultGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
}

// Main runs the service (or `<name> migrate`) and exits.
func Main(spec Spec) {
	defaultGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, spec, os.Args[1:], NewEnv()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", spec.Name, err)
		os.Exit(1)
	}
}

// Run is Main without the process: it returns when ctx ends and the service
// has shut down.
func Run(ctx context.Context, spec Spec, args []string, env *Env) error {
	cfg, err := LoadConfig(env, spec.Name, spec.DefaultPort)
	if err != nil {
		return err
	}
	log := NewLogger(os.Stdout, cfg.LogLevel).With("service", spec.Name)
	if len(args) > 0 && args[0] != "serve" {
		if args[0] != "migrate" {
			return fmt.Errorf("unknown command %q: want serve (default) or migrate", args[0])
		}
		return migrate(ctx, spec, cfg, log)
	}
	tcfg, err := tracing.LoadConfig(env.lookup, spec.Name)
	if err != nil {
		return err
	}
	if err := prepareSchema(ctx, spec, cfg, log); err != nil {
		return err
	}
	kafkaconf.Use(cfg.Kafka)
	return serve(ctx, spec, cfg, tcfg, log)
}

// NewLogger returns the JSON logger services use.
func NewLogger(w *os.File, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

func serve(ctx context.Context, spec Spec, cfg Config, tcfg tracing.Config, log *slog.Logger) error {
	// Tracing stops last, after the work that records spans, flushing them.
	stopTracing, err := tracing.Setup(ctx, tcfg, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("stop tracing", "err", err)
		}
	}()
	// Two pools, so a flood of requests cannot starve the consumer and the
	// relay of connections, nor a consumer backlog the requests.
	pool, err := OpenPool(ctx, cfg, cfg.DBMaxConns, "http")
	if err != nil {
		return err
	}
	defer pool.Close()
	consumerPool, err := OpenPool(ctx, cfg, cfg.DBConsumerMaxConns, "consumer")
	if err != nil {
		return err
	}
	defer consumerPool.Close()
	p, err := assemble(ctx, spec, cfg, log, pool, consumerPool)
	if err != nil {
		return err
	}
	return p.run(ctx)
}

// process is a service's parts, assembled and ready to run.
type process struct {
	spec      Spec
	cfg       Config
	log       *slog.Logger
	metrics   *prometheus.Registry
	parts     Parts
	topics    []string
	relay     *outbox.Relay
	runner    *inbox.Runner
	retention *retention
	broker    *brokerHealth
	srv       *http.Server
}

// assemble builds the service (Spec.Build) and the machinery around it: the
// relay, the consumer, retention, broker health and the HTTP server.
func assemble(ctx context.Context, spec Spec, cfg Config, log *slog.Logger, pool, consumerPool *pgxpool.Pool) (*process, error) {
	p := &process{spec: spec, cfg: cfg, log: log, metrics: prometheus.NewRegistry()}
	p.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"service": spec.Name}, p.metrics)
	registry := envelope.NewRegistry()
	events.Register(registry)
	if spec.Register != nil {
		spec.Register(registry)
	}

	if err := cfg.Auth.Start(log, reg); err != nil {
		return nil, err
	}
	deps := Deps{Config: cfg, Logger: log, Pool: pool, Metrics: reg, Registry: registry}
	parts, err := spec.Build(ctx, deps)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", spec.Name, err)
	}
	p.parts = parts

	p.relay, err = outbox.NewRelay(consumerPool, outbox.Config{
		Brokers: cfg.Brokers, Name: spec.Name + "-relay", BatchSize: cfg.RelayBatch, Linger: cfg.RelayLinger, PollInterval: cfg.RelayPoll,
		LeaseTTL: cfg.RelayLeaseTTL, MaxAttempts: cfg.RelayMaxTries, Retention: cfg.RelayRetention,
		Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	ib, topics, err := NewInbox(spec, deps, parts, p.metrics)
	if err != nil {
		return nil, err
	}
	p.topics = topics
	p.runner, err = inbox.NewRunner(consumerPool, ib, inbox.RunnerConfig{
		Brokers: cfg.Brokers, Group: cfg.ConsumerGroup, Topics: topics,
		BatchSize: cfg.ConsumerBatch, MaxWait: cfg.ConsumerWait, Lanes: cfg.ConsumerLanes, SweepInterval: cfg.SweepInterval,
		Logger: log, Registerer: p.metrics, // the inbox labels its metrics with the service itself
	})
	if err != nil {
		return nil, fmt.Errorf("build consumer: %w", err)
	}
	p.retention, err = newRetention(consumerPool, ib, cfg, reg, log)
	if err != nil {
		return nil, err
	}
	p.retention.months = spec.MonthTables

	p.broker = newBrokerHealth(cfg.Brokers, reg, log)
	p.srv = NewHTTPServer(cfg, newServiceRouter(deps, p.metrics, parts, p.broker), log)
	return p, nil
}

// run serves until ctx ends or a part fails, then shuts down: it stops
// taking requests, then drains the consumer and the relay; the caller closes
// the pools after.
func (p *process) run(ctx context.Context) error {
	ln, err := net.Listen("tcp", p.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on HTTP_ADDR %s: %w", p.cfg.HTTPAddr, err)
	}

	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	p.startWork(workCtx, &wg, errs)
	go func() {
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("http server: %w", err)
		}
	}()
	if p.cfg.MetricsAddr != "" {
		stopMetrics, err := serveMetrics(p.cfg.MetricsAddr, p.metrics, p.log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if p.cfg.PprofAddr != "" {
		stopPprof, err := servePprof(p.cfg.PprofAddr, p.log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	p.log.Info("service started", "http", ln.Addr().String(), "brokers", p.cfg.Brokers,
		"kafka_security", p.cfg.Kafka.String(), "topics", p.topics)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		p.log.Error("stopping after failure", "err", runErr)
	}
	// Stop taking requests, then drain the consumer and the relay, then the
	// pool closes (deferred by serve).
	p.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), p.cfg.Shutdown)
	defer cancel()
	if err := p.srv.Shutdown(sctx); err != nil {
		p.log.Warn("http shutdown", "err", err)
	}
	stopWork()
	wg.Wait()
	p.log.Info("stopped")
	return runErr
}

// startWork starts the relay, the consumer, broker health, retention and the
// service's own work under ctx; a failure is sent on errs.
func (p *process) startWork(ctx context.Context, wg *sync.WaitGroup, errs chan<- error) {
	wg.Go(func() {
		if err := p.relay.Run(ctx); err != nil {
			errs <- fmt.Errorf("outbox relay: %w", err)
		}
	})
	wg.Go(func() {
		if err := p.runner.Run(ctx); err != nil {
			errs <- fmt.Errorf("consumer: %w", err)
		}
	})
	wg.Go(func() { p.broker.run(ctx, 5*time.Second) })
	wg.Go(func() { p.retention.run(ctx) })
	if p.parts.Work != nil {
		wg.Go(func() {
			if err := p.parts.Work(ctx); err != nil {
				errs <- fmt.Errorf("%s work: %w", p.spec.Name, err)
			}
		})
	}
}

// NewInbox builds the service's inbox and returns it with the topics it
// consumes: the service's own handlers, plus RedriveRequested from
// ops.commands.v1 (ops.Redriver), with every new quarantine announced as
// EventQuarantined through the outbox (ops.PublishQuarantine). reg
// registers the inbox metrics (labelled with the service by the inbox
// itself); nil registers none.
func NewInbox(spec Spec, d Deps, parts Parts, reg prometheus.Registerer) (*inbox.Inbox, []string, error) {
	redriver := ops.NewRedriver(spec.Name, d.Logger)
	handlers := make(map[string]inbox.Handler, len(parts.Handlers)+1)
	for t, h := range parts.Handlers {
		handlers[t] = h
	}
	_, batched := parts.BatchHandlers[events.TypeRedriveRequested]
	if _, taken := handlers[events.TypeRedriveRequested]; taken || batched {
		return nil, nil, fmt.Errorf("build inbox: %s is handled by the service runtime", events.TypeRedriveRequested)
	}
	handlers[events.TypeRedriveRequested] = inbox.On(redriver.Handle)
	ib, err := inbox.New(d.Registry, handlers, inbox.Options{
		Service: spec.Name, Logger: d.Logger, Registerer: reg,
		OnQuarantine: ops.PublishQuarantine(spec.Name), OriginConstraints: spec.OriginConstraints,
		BatchHandlers: parts.BatchHandlers, Authorize: AuthorizeProducer, MintedAggregates: events.MintedAggregates,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("build inbox: %w", err)
	}
	redriver.SetInbox(ib)
	topics := slices.Clone(parts.Topics)
	if !slices.Contains(topics, events.TopicOpsCommands) {
		topics = append(topics, events.TopicOpsCommands)
	}
	return ib, topics, nil
}

// AuthorizeProducer is every service's inbox check of who produced an event
// (inbox.Options.Authorize): the event must come from its type's topic and
// name a producer allowed to write it (events.Authorized); the broker's ACLs
// let only that service's principal write the topic. Anything else is
// quarantined as unauthorized_producer.
func AuthorizeProducer(topic string, e *envelope.Envelope) bool {
	return events.Authorized(e.EventType, e.Producer, topic)
}

// NewRouter returns the service's HTTP handler: /healthz, /readyz and
// /metrics (gathered from metrics; not when Config.MetricsAddr serves them on
// a listener of their own), the internal operator endpoints (ops.API), and
// the service's own routes, all behind auth.Middleware with the keys of
// d.Config.Auth, the request deadline (Config.RequestTimeout) and the
// rate limit (Config.RateLimit, RateBurst: per tenant for requests admitted
// to a tenant's paths, per caller for refused ones, whatever tenant their
// path names). Its /healthz reports
// the broker as "unknown": the running service probes it (see serve).
func NewRouter(d Deps, metrics prometheus.Gatherer, parts Parts) chi.Router {
	return newServiceRouter(d, metrics, parts, nil)
}

func newServiceRouter(d Deps, metrics prometheus.Gatherer, parts Parts, broker *brokerHealth) chi.Router {
	r := newRouter(d, metrics, broker)
	ops.NewAPI(d.Pool, parts.Reconciliation, d.Logger).Routes(r)
	if parts.Routes != nil {
		parts.Routes(r)
	}
	if err := auth.Check(r); err != nil {
		panic(err) // a route without declared roles: a programming error
	}
	return r
}

func newRouter(d Deps, metrics prometheus.Gatherer, broker *brokerHealth) chi.Router {
	cfg, log, pool := d.Config, d.Logger, d.Pool
	r := chi.NewRouter()
	r.Use(httpx.Trace) // outermost: the span sees the recoverer's 500
	r.Use(recoverer(log))
	if cfg.HTTPMaxHeaderBytes > 0 {
		r.Use(httpx.MaxHeaderBytes(cfg.HTTPMaxHeaderBytes))
	}
	r.Use(httpx.CleanText) // no NUL or invalid UTF-8 in the path or the query
	if cfg.RequestTimeout > 0 {
		r.Use(httpx.Deadline(cfg.RequestTimeout))
	}
	// The limiter takes no token itself: it only puts itself in the
	// request's context, in front of authentication. Access is decided
	// first, then a token is taken: by auth.Middleware (a missing or refused
	// token: its address's), by each route's Guard (admitted: its tenant's;
	// forbidden: its caller's) and by the answers to no route below (the
	// caller's), so a request refused 401, 403, 404 or 405 never spends the
	// bucket of the tenant its path names, and refused callers are limited
	// by who they are.
	if cfg.RateLimit > 0 {
		r.Use(rateLimiter(cfg, d.Metrics).Middleware)
	}
	r.Use(auth.Middleware(cfg.Auth, log))
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		if httpx.Limit(w, req, auth.CallerKey(req)) {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusNotFound, "not_found", "no such resource"))
		}
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		if httpx.Limit(w, req, auth.CallerKey(req)) {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this resource"))
		}
	})
	// Liveness: the process answers. The detail says what it reaches, in
	// words, never a raw error.
	r.Get("/healthz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		db := "ok"
		if err := pool.Ping(ctx); err != nil {
			db = "unavailable"
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok",
			"checks": map[string]string{"database": db, "broker": broker.status()}})
	})
	// Readiness: the database answers. A broker outage does not make the
	// service unready: commands still commit, and the outbox publishes them
	// when the broker is back. The answer names the service, so a launcher
	// can tell its process from another one answering on the same port.
	r.Get("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			log.Warn("not ready: database unreachable", "err", err)
			httpx.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unready", "service": cfg.Name, "database": "unavailable"})
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready", "service": cfg.Name, "database": "ok"})
	})
	if cfg.MetricsAddr == "" {
		r.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	}
	return r
}

// rateLimiter is the limiter of the process, counting refusals in
// http_rate_limited_total.
func rateLimiter(cfg Config, reg prometheus.Registerer) *httpx.RateLimiter {
	l := httpx.NewRateLimiter(cfg.RateLimit, cfg.RateBurst)
	limited := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "http_rate_limited_total",
		Help: "Requests refused with 429 rate_limited by the rate limit (a tenant's admitted requests, or a caller's refused ones).",
	})
	if reg != nil {
		if err := reg.Register(limited); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				limited = are.ExistingCollector.(prometheus.Counter)
			}
		}
	}
	l.OnLimited = func(string) { limited.Inc() }
	return l
}

// recoverer turns a panic into a logged 500 problem; no handler should panic.
func recoverer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
					httpx.WriteProblem(w, httpx.NewProblem(http.StatusInternalServerError, "internal", "internal error"))
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}
