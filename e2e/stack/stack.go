// Package stack runs the whole system on one machine without Docker: a
// throwaway PostgreSQL cluster (or an existing server) with one database per
// service; a Kafka-protocol broker (the embedded kfake, hosted by the
// launcher's own process, a real Apache Kafka broker, or an existing
// cluster) with the topics created; toxiproxy in front of Kafka and of each
// service's database, so a test can cut any path; and the five services as
// separate OS processes built from the workspace, each instance with its own
// log file. `make demo`, `make up` and the e2e tests start it.
//
//	s, err := stack.Start(ctx, stack.Options{})
//	defer s.Stop(context.Background())
//	resp, err := http.Get(s.URL("meter", 0) + "/readyz")
//	s.Proxy(stack.ProxyKafka).Cut()      // every service loses the broker
//	s.Kill("billing", 0)                 // SIGKILL, as a crash would
//	s.Restart(ctx, "billing", 0)         // same port, same log file
//
// Children die with the launcher: services run in process groups of their
// own with a parent-death signal (SIGKILL), the Apache broker likewise, and
// the PostgreSQL cluster has a guard process that stops it when the launcher
// is gone. Each run keeps its state in a directory of its own under
// Options.StateDir, removed by Stop; directories left by a launcher that was
// killed are removed by the next Start, so no pid or lock file can block a
// second run.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/testkit/faultproxy"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/pgcluster"
)

// Services lists the five services in the order they are started and shown.
var Services = []string{"meter", "usage", "billing", "invoice", "query"}

// DefaultPorts are the services' HTTP ports from the design (meter 8081 ..
// query 8085), the ones `make up` uses.
func DefaultPorts() map[string]int {
	return map[string]int{"meter": 8081, "usage": 8082, "billing": 8083, "invoice": 8084, "query": 8085}
}

// Kafka kinds for Options.Kafka.
const (
	KafkaEmbedded = "embedded" // kfake in the launcher's process (default)
	KafkaApache   = "apache"   // a real Apache Kafka broker in KRaft mode, a child JVM
	KafkaExternal = "external" // an existing cluster, Options.KafkaBrokers
)

// Proxy names: ProxyKafka, and ProxyDB(service) for each service's database.
const ProxyKafka = "kafka"

// ProxyDB returns the name of the proxy in front of service's database.
func ProxyDB(service string) string { return "db-" + service }

// DefaultPartitions is the partition count of the topics unless
// Options.Partitions says otherwise.
const DefaultPartitions = 6

// Options configures Start. The zero value starts everything on free ports
// with the embedded broker and a throwaway PostgreSQL cluster.
type Options struct {
	// StateDir holds one directory per run (data, logs, binaries); empty
	// means DefaultStateDir(). A run's directory is removed by Stop unless
	// Keep is set; directories of runs whose launcher died are removed by
	// the next Start.
	StateDir string
	// Keep leaves the run's directory (logs, PostgreSQL data) after Stop.
	Keep bool

	// PostgresURL names an existing PostgreSQL server (a superuser or a
	// role with CREATEDB, host:port) to use instead of a throwaway
	// cluster. Start drops and recreates the databases
	// <DatabasePrefix>_<service> on it; Stop leaves them.
	PostgresURL string
	// DatabasePrefix prefixes the database names on an existing server;
	// empty means "usagebilling". The throwaway cluster names its
	// databases after the services.
	DatabasePrefix string
	// PostgresPort is the throwaway cluster's port on 127.0.0.1; zero
	// picks a free one.
	PostgresPort int
	// PostgresFast turns off the throwaway cluster's durability (fsync,
	// synchronous_commit). Faster, but a PostgreSQL crash then loses
	// commits: leave it off for tests that kill the database.
	PostgresFast bool
	// DirectDB connects the services to their databases directly, with no
	// proxy in front (Proxy(ProxyDB(...)) is nil then): for load runs, where
	// the proxy's own latency would be measured as the system's. Fault tests
	// need the proxies.
	DirectDB bool
	// DirectKafka connects the services to the launcher's broker directly,
	// with no proxy in front (Proxy(ProxyKafka) is nil then, and KafkaPort
	// is the broker's own port): for load runs, where the proxy's CPU and
	// latency would be counted as the system's. Fault tests need the proxy.
	DirectKafka bool

	// Kafka is KafkaEmbedded (default), KafkaApache or KafkaExternal;
	// KafkaBrokers alone implies KafkaExternal.
	Kafka string
	// KafkaBrokers are the bootstrap addresses of an existing cluster.
	// The launcher cannot put a proxy in front of a cluster it did not
	// start (brokers advertise their own addresses), so Proxy(ProxyKafka)
	// is nil then.
	KafkaBrokers []string
	// KafkaPort is the port of the Kafka proxy (of the broker itself with
	// DirectKafka), the address services and clients bootstrap from; zero
	// picks a free one.
	KafkaPort int
	// Partitions is the partition count of the topics; zero means
	// DefaultPartitions.
	Partitions int

	// Services lists the services to start; empty means all of Services.
	Services []string
	// Ports are the HTTP ports of each service's first instance; a
	// missing or zero entry picks a free port, as do further instances.
	Ports map[string]int
	// Instances is the number of processes per service; a missing or zero
	// entry means one. Instances share the service's database and
	// consumer group.
	Instances map[string]int
	// Env is added to every service's environment, ServiceEnv to one
	// service's (after Env). The launcher sets DATABASE_URL,
	// KAFKA_BROKERS, HTTP_ADDR, LOG_LEVEL, AUTH_DEV_KEY=true and
	// SERVICE_URLS itself; entries here override all but HTTP_ADDR.
	Env        map[string]string
	ServiceEnv map[string]map[string]string
	// LogLevel is the services' LOG_LEVEL; empty means info.
	LogLevel string

	// BinDir holds prebuilt service binaries (<BinDir>/<service>, as
	// Build writes them); empty means build them into the run's directory.
	BinDir string
	// SourceDir is the workspace root to build from; empty means the one
	// `go env GOWORK` names for the current directory.
	SourceDir string

	// ReadyTimeout bounds the wait for each service's /readyz; zero means
	// two minutes.
	ReadyTimeout time.Duration
	// Logger receives progress (info) and trouble (warn); nil discards.
	Logger *slog.Logger
}

// Stack is a running system. Its methods are safe for concurrent use.
type Stack struct {
	opts  Options
	log   *slog.Logger // progress
	quiet *slog.Logger // for the libraries: warnings only
	dir   string

	pg      *pgcluster.Cluster
	dbNames map[string]string // service -> database name
	direct  map[string]string // service -> direct database URL
	proxied map[string]string // service -> database URL through its proxy
	// roles are each service's URLs as its owner and its runtime role (roles.go).
	roles map[string]roleURLs

	embedded *kfake.Cluster
	apache   *kafkabroker.Apache
	brokers  []string // what services and clients bootstrap from

	proxies   map[string]*faultproxy.Proxy
	instances map[string][]*instance

	mu       sync.Mutex
	keep     bool
	stopOnce sync.Once
	stopErr  error
}

// Start starts the system and returns once every service instance answers
// /readyz with 200. On failure it stops whatever it started and returns an
// error naming the step (and, for a service, the last lines of its log).
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	s := &Stack{
		opts: opts, log: opts.Logger, quiet: quietLogger(opts.Logger), keep: opts.Keep,
		dbNames: map[string]string{}, direct: map[string]string{}, proxied: map[string]string{},
		proxies: map[string]*faultproxy.Proxy{}, instances: map[string][]*instance{},
	}
	if err := checkPorts(opts); err != nil {
		return nil, err
	}
	began := time.Now()
	sweepStale(opts.StateDir, s.log)
	if s.dir, err = newRunDir(opts.StateDir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if serr := s.Stop(context.WithoutCancel(ctx)); serr != nil {
				err = errors.Join(err, fmt.Errorf("clean up after the failed start: %w", serr))
			}
		}
	}()
	s.log.Info("state directory", "dir", s.dir)

	// Build while PostgreSQL and Kafka start: on a cold cache the build
	// is the longest step.
	binDir := opts.BinDir
	built := make(chan error, 1)
	if binDir == "" {
		binDir = filepath.Join(s.dir, "bin")
		go func() {
			s.log.Info("building the services", "from", opts.SourceDir, "into", binDir)
			t := time.Now()
			err := Build(ctx, opts.SourceDir, binDir, opts.Services...)
			if err == nil {
				s.log.Info("services built", "took", since(t))
			}
			built <- err
		}()
	} else {
		built <- checkBinaries(binDir, opts.Services)
	}
	waitBuild := func() error {
		select {
		case err := <-built:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	if err := s.startPostgres(ctx); err != nil {
		_ = waitBuild()
		return nil, err
	}
	if err := s.createRoles(ctx); err != nil {
		_ = waitBuild()
		return nil, err
	}
	if err := s.startKafka(ctx); err != nil {
		_ = waitBuild()
		return nil, err
	}
	if err := waitBuild(); err != nil {
		return nil, err
	}
	if err := s.startServices(ctx, binDir); err != nil {
		return nil, err
	}
	s.log.Info("stack ready", "took", since(began))
	return s, nil
}

// normalize fills in o's defaults and reports every inconsistent option at
// once.
func (o *Options) normalize() error {
	problems := o.normalizeKafka()
	problems = append(problems, o.normalizeServices()...)
	problems = append(problems, o.normalizePostgres()...)
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	if o.BinDir == "" && o.SourceDir == "" {
		root, err := WorkspaceRoot()
		if err != nil {
			problems = append(problems, err.Error())
		}
		o.SourceDir = root
	}
	if len(problems) > 0 {
		return errors.New("stack options:\n  " + strings.Join(problems, "\n  "))
	}
	return nil
}

// normalizeKafka settles which broker to use and the topics' partitions.
func (o *Options) normalizeKafka() []string {
	var problems []string
	if o.Kafka == "" {
		o.Kafka = KafkaEmbedded
		if len(o.KafkaBrokers) > 0 {
			o.Kafka = KafkaExternal
		}
	}
	switch o.Kafka {
	case KafkaEmbedded, KafkaApache:
		if len(o.KafkaBrokers) > 0 {
			problems = append(problems, fmt.Sprintf("Kafka %q with KafkaBrokers %v: pick one (KAFKA_BROKERS means an existing cluster)", o.Kafka, o.KafkaBrokers))
		}
	case KafkaExternal:
		if len(o.KafkaBrokers) == 0 {
			problems = append(problems, "Kafka \"external\" needs KafkaBrokers (KAFKA_BROKERS=host:port,...)")
		}
		if o.KafkaPort != 0 {
			problems = append(problems, "KafkaPort is the port of the launcher's Kafka proxy, which an existing cluster does not get")
		}
	default:
		problems = append(problems, fmt.Sprintf("Kafka %q: want %q, %q or %q", o.Kafka, KafkaEmbedded, KafkaApache, KafkaExternal))
	}
	if o.Partitions == 0 {
		o.Partitions = DefaultPartitions
	}
	if o.Partitions < 0 {
		problems = append(problems, fmt.Sprintf("Partitions %d: want a positive count", o.Partitions))
	}
	return problems
}

// normalizeServices checks the services named, their instances and ports.
func (o *Options) normalizeServices() []string {
	var problems []string
	if len(o.Services) == 0 {
		o.Services = slices.Clone(Services)
	}
	for _, name := range o.Services {
		if !slices.Contains(Services, name) {
			problems = append(problems, fmt.Sprintf("unknown service %q: want one of %v", name, Services))
		}
	}
	for name, n := range o.Instances {
		if !slices.Contains(Services, name) || n < 0 {
			problems = append(problems, fmt.Sprintf("Instances[%q] = %d: want a service name and a count of at least 0", name, n))
		}
	}
	for name, p := range o.Ports {
		if !slices.Contains(Services, name) || p < 0 || p > 65535 {
			problems = append(problems, fmt.Sprintf("Ports[%q] = %d: want a service name and a port", name, p))
		}
	}
	return problems
}

// normalizePostgres checks an existing server's URL against the throwaway
// cluster's port and names the databases' prefix.
func (o *Options) normalizePostgres() []string {
	var problems []string
	if o.PostgresURL != "" {
		if o.PostgresPort != 0 {
			problems = append(problems, "PostgresPort is the throwaway cluster's port; with PostgresURL there is none")
		}
		if _, err := upstreamOf(o.PostgresURL); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if o.DatabasePrefix == "" {
		o.DatabasePrefix = "usagebilling"
	}
	return problems
}

// quietLogger passes only warnings and errors of the libraries the stack
// drives (pgcluster, kafkabroker, toxiproxy): their progress is ours to tell.
func quietLogger(l *slog.Logger) *slog.Logger {
	return slog.New(levelFilter{l.Handler(), slog.LevelWarn})
}

type levelFilter struct {
	slog.Handler
	min slog.Level
}

func (f levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}

func (f levelFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return levelFilter{f.Handler.WithAttrs(as), f.min}
}

func (f levelFilter) WithGroup(g string) slog.Handler {
	return levelFilter{f.Handler.WithGroup(g), f.min}
}

func (s *Stack) startPostgres(ctx context.Context) error {
	var upstream string
	if s.opts.PostgresURL == "" {
		s.log.Info("starting a throwaway PostgreSQL cluster")
		t := time.Now()
		c, err := pgcluster.Start(ctx, pgcluster.Options{
			Dir: filepath.Join(s.dir, "postgres"), Port: s.opts.PostgresPort, Fast: s.opts.PostgresFast, Logger: s.quiet,
		})
		if err != nil {
			if s.opts.PostgresPort != 0 && strings.Contains(err.Error(), "already in use") {
				return portInUse(s.opts.PostgresPort, "PostgreSQL", "postgres")
			}
			return fmt.Errorf("start postgres: %w", err)
		}
		s.pg = c
		for _, name := range s.opts.Services {
			if err := c.CreateDatabase(ctx, name); err != nil {
				return err
			}
			s.dbNames[name] = name
			s.direct[name] = c.URL(name)
		}
		upstream = fmt.Sprintf("127.0.0.1:%d", c.Port())
		s.log.Info("postgres ready", "port", c.Port(), "databases", len(s.opts.Services), "took", since(t))
	} else {
		s.log.Info("using an existing PostgreSQL server", "url", redact(s.opts.PostgresURL))
		var err error
		if upstream, err = upstreamOf(s.opts.PostgresURL); err != nil {
			return err
		}
		if err := s.recreateDatabases(ctx); err != nil {
			return err
		}
	}
	for _, name := range s.opts.Services {
		if s.opts.DirectDB {
			s.proxied[name] = s.direct[name]
			continue
		}
		p, err := faultproxy.New(ProxyDB(name), "127.0.0.1:0", upstream, s.quiet)
		if err != nil {
			return err
		}
		s.proxies[ProxyDB(name)] = p
		s.proxied[name] = withHost(s.direct[name], p.Addr())
	}
	return nil
}

// recreateDatabases drops and creates <prefix>_<service> on the existing
// server, so every run starts from empty databases.
func (s *Stack) recreateDatabases(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.opts.PostgresURL)
	if err != nil {
		return fmt.Errorf("connect to the PostgreSQL server %s: %w", redact(s.opts.PostgresURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, name := range s.opts.Services {
		db := s.opts.DatabasePrefix + "_" + name
		ident := pgx.Identifier{db}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", db, err)
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
			return fmt.Errorf("create database %s: %w", db, err)
		}
		s.dbNames[name] = db
		s.direct[name] = withDatabase(s.opts.PostgresURL, db)
	}
	return nil
}

func (s *Stack) startKafka(ctx context.Context) error {
	t := time.Now()
	switch s.opts.Kafka {
	case KafkaEmbedded:
		s.log.Info("starting the embedded Kafka-protocol broker (kfake, in this process)")
		proxy, cluster, err := startEmbedded(s.opts.KafkaPort, s.opts.Partitions, s.opts.DirectKafka, s.quiet)
		if err != nil {
			return err
		}
		s.embedded = cluster
		s.brokers = []string{cluster.ListenAddrs()[0]}
		if proxy != nil {
			s.proxies[ProxyKafka] = proxy
			s.brokers = []string{proxy.Addr()}
		}
	case KafkaApache:
		s.log.Info("starting Apache Kafka (KRaft, a child JVM)")
		port, advertised, err := s.apachePort()
		if err != nil {
			return err
		}
		a, err := kafkabroker.StartApache(ctx, kafkabroker.ApacheOptions{
			Dir: filepath.Join(s.dir, "kafka"), Port: port, AdvertisedAddr: advertised,
			Partitions: s.opts.Partitions, Logger: s.quiet,
		})
		if err != nil {
			return err
		}
		s.apache = a
		s.brokers = []string{advertised}
	case KafkaExternal:
		s.log.Info("using an existing Kafka cluster", "brokers", strings.Join(s.opts.KafkaBrokers, ","))
		s.brokers = slices.Clone(s.opts.KafkaBrokers)
	}
	if err := kafkabroker.WaitReady(ctx, s.brokers); err != nil {
		return err
	}
	if err := kafkabroker.CreateTopics(ctx, s.brokers, s.opts.Partitions, events.AllTopics...); err != nil {
		return err
	}
	s.log.Info("kafka ready", "bootstrap", strings.Join(s.brokers, ","), "topics", len(events.AllTopics),
		"partitions", s.opts.Partitions, "took", since(t))
	return nil
}

func (s *Stack) startServices(ctx context.Context, binDir string) error {
	// Ports first: every service is told every service's URL.
	var all []*instance
	for _, name := range s.opts.Services {
		n := max(s.opts.Instances[name], 1)
		for i := range n {
			port := 0
			if i == 0 {
				port = s.opts.Ports[name]
			}
			in := &instance{
				service: name, index: i, port: port, fixedPort: port != 0,
				bin:     filepath.Join(binDir, name),
				logPath: filepath.Join(s.dir, "logs", fmt.Sprintf("%s.%d.log", name, i)),
				log:     s.log,
			}
			if port == 0 {
				p, err := freePort()
				if err != nil {
					return err
				}
				in.port = p
			}
			s.instances[name] = append(s.instances[name], in)
			all = append(all, in)
		}
	}
	for _, in := range all {
		in.env = s.serviceEnv(in.service)
	}
	if err := s.migrateAll(ctx, binDir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	s.log.Info("starting the services", "processes", len(all))
	t := time.Now()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, in := range all {
		wg.Go(func() { errs[i] = in.startReady(ctx, s.opts.ReadyTimeout) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// The logs the error points to stay for a look; the next Start
		// removes them once this process has ended.
		s.Keep()
		return err
	}
	s.log.Info("services ready", "took", since(t))
	return nil
}

// serviceEnv is the environment of a service's processes: the launcher's
// own, less every variable the services read (so a stray CONSUMER_GROUP in
// the caller's shell cannot leak in), plus the stack's settings. The local
// stack accepts the published development key (AUTH_DEV_KEY, on its
// loopback listeners); Env can set AUTH_ISSUER and AUTH_JWKS instead.
func (s *Stack) serviceEnv(name string) map[string]string {
	var urls []string
	for _, other := range s.opts.Services {
		urls = append(urls, other+"="+s.URL(other, 0))
	}
	env := map[string]string{
		"DATABASE_URL":  s.runtimeURL(name),
		"KAFKA_BROKERS": strings.Join(s.brokers, ","),
		"LOG_LEVEL":     s.opts.LogLevel,
		"AUTH_DEV_KEY":  "true",
		"SERVICE_URLS":  strings.Join(urls, ","),
	}
	maps.Copy(env, s.opts.Env)
	maps.Copy(env, s.opts.ServiceEnv[name])
	return env
}

// Stop stops the services (SIGTERM, then SIGKILL for any still running when
// ctx ends or after 20 seconds), the proxies, Kafka and PostgreSQL, and
// removes the run's directory unless Options.Keep (or Keep) says otherwise.
// It returns once every process it started has exited. Calling it again
// returns the first result.
func (s *Stack) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Stack) stop(ctx context.Context) error {
	t := time.Now()
	var errs []error
	var wg sync.WaitGroup
	for _, ins := range s.instances {
		for _, in := range ins {
			wg.Go(func() {
				if err := in.stop(ctx, 20*time.Second); err != nil {
					s.log.Warn("stop service", "service", in.name(), "err", err)
				}
			})
		}
	}
	wg.Wait()
	for _, p := range s.proxies {
		_ = p.Close()
	}
	if s.embedded != nil {
		s.embedded.Close()
	}
	if s.apache != nil {
		if err := s.apache.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.pg != nil {
		if err := s.pg.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	keep := s.keep
	s.mu.Unlock()
	if s.dir != "" {
		if keep {
			s.log.Info("state directory kept", "dir", s.dir)
		} else if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove state directory: %w", err))
		}
	}
	s.log.Info("stack stopped", "took", since(t))
	return errors.Join(errs...)
}

// Keep makes Stop leave the run's directory (logs, data), for example
// after a failure worth looking into.
func (s *Stack) Keep() {
	s.mu.Lock()
	s.keep = true
	s.mu.Unlock()
}

// Dir returns the run's directory: bin/, logs/, postgres/, kafka/.
func (s *Stack) Dir() string { return s.dir }

// Services returns the names of the services this stack runs.
func (s *Stack) Services() []string { return slices.Clone(s.opts.Services) }

// Instances returns the number of processes of service.
func (s *Stack) Instances(service string) int { return len(s.instances[service]) }

// URL returns the base URL (http://127.0.0.1:port) of a service instance,
// or "" if there is no such instance.
func (s *Stack) URL(service string, instance int) string {
	in := s.instance(service, instance)
	if in == nil {
		return ""
	}
	return "http://" + in.addr()
}

// URLs returns the base URL of each service's first instance.
func (s *Stack) URLs() map[string]string {
	out := map[string]string{}
	for _, name := range s.opts.Services {
		out[name] = s.URL(name, 0)
	}
	return out
}

// DatabaseURL returns the direct URL of service's database, past its proxy:
// for reconciliation and inspection, unaffected by a cut.
func (s *Stack) DatabaseURL(service string) string { return s.direct[service] }

// DatabaseURLs returns DatabaseURL for every service.
func (s *Stack) DatabaseURLs() map[string]string { return maps.Clone(s.direct) }

// ServiceDatabaseURL returns the URL service's processes use: through the
// proxy ProxyDB(service).
func (s *Stack) ServiceDatabaseURL(service string) string { return s.proxied[service] }

// KafkaBrokers returns the bootstrap addresses the services use: the Kafka
// proxy's address, or the existing cluster's.
func (s *Stack) KafkaBrokers() []string { return slices.Clone(s.brokers) }

// Proxy returns the proxy named name (ProxyKafka, ProxyDB(service)), or nil:
// there is no Kafka proxy in front of an existing cluster.
func (s *Stack) Proxy(name string) *faultproxy.Proxy { return s.proxies[name] }

// ProxyNames lists the proxies, sorted.
func (s *Stack) ProxyNames() []string { return slices.Sorted(maps.Keys(s.proxies)) }

// Broker returns the Apache Kafka broker, to Kill and Start it, or nil
// unless Options.Kafka is KafkaApache.
func (s *Stack) Broker() *kafkabroker.Apache { return s.apache }

// Embedded returns the embedded kfake cluster, or nil unless Options.Kafka
// is KafkaEmbedded.
func (s *Stack) Embedded() *kfake.Cluster { return s.embedded }

// Postgres returns the throwaway cluster, to Stop and Start it, or nil with
// an existing server.
func (s *Stack) Postgres() *pgcluster.Cluster { return s.pg }

// PID returns the process id of a service instance, or 0 when it is not
// running.
func (s *Stack) PID(service string, instance int) int {
	in := s.instance(service, instance)
	if in == nil {
		return 0
	}
	return in.pid()
}

// LogFile returns the log file of a service instance (stdout and stderr,
// appended across restarts).
func (s *Stack) LogFile(service string, instance int) string {
	in := s.instance(service, instance)
	if in == nil {
		return ""
	}
	return in.logPath
}

// Process is one OS process the stack started.
type Process struct {
	Name string // "meter.0", "postgres"
	PID  int
}

// Processes lists the running processes the stack started: every service
// instance and the PostgreSQL server (postmaster). The embedded broker and
// the proxies run inside the launcher's own process.
func (s *Stack) Processes() []Process {
	var out []Process
	for _, name := range s.opts.Services {
		for _, in := range s.instances[name] {
			if pid := in.pid(); pid > 0 {
				out = append(out, Process{Name: in.name(), PID: pid})
			}
		}
	}
	if s.pg != nil {
		if pid := postmasterPID(filepath.Join(s.pg.Dir(), "data")); pid > 0 {
			out = append(out, Process{Name: "postgres", PID: pid})
		}
	}
	return out
}

// Kill kills a service instance with SIGKILL (its whole process group), as
// a crash would, and waits for it to exit.
func (s *Stack) Kill(service string, instance int) error {
	in := s.instance(service, instance)
	if in == nil {
		return fmt.Errorf("kill %s.%d: no such service instance", service, instance)
	}
	s.log.Info("killing", "service", in.name())
	return in.kill()
}

// Restart starts a service instance again on the same port with the same
// environment and log file, and waits until it is ready. A running instance
// is stopped first (SIGTERM, SIGKILL after 20 seconds).
func (s *Stack) Restart(ctx context.Context, service string, instance int) error {
	in := s.instance(service, instance)
	if in == nil {
		return fmt.Errorf("restart %s.%d: no such service instance", service, instance)
	}
	s.log.Info("restarting", "service", in.name())
	if err := in.stop(ctx, 20*time.Second); err != nil {
		return err
	}
	return in.startReady(ctx, s.opts.ReadyTimeout)
}

// Upgrade restarts a service instance like Restart, but from another
// binary: how an operator rolls out a fixed build (for example one that
// decodes a new schema version) before redriving what the old one
// quarantined. Later Restarts keep the new binary.
func (s *Stack) Upgrade(ctx context.Context, service string, instance int, binary string) error {
	in := s.instance(service, instance)
	if in == nil {
		return fmt.Errorf("upgrade %s.%d: no such service instance", service, instance)
	}
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("upgrade %s: %w", in.name(), err)
	}
	s.log.Info("upgrading", "service", in.name(), "binary", binary)
	if err := s.migrate(ctx, service, binary); err != nil {
		return err
	}
	if err := in.stop(ctx, 20*time.Second); err != nil {
		return err
	}
	in.mu.Lock()
	in.bin = binary
	in.mu.Unlock()
	return in.startReady(ctx, s.opts.ReadyTimeout)
}

func (s *Stack) instance(service string, i int) *instance {
	ins := s.instances[service]
	if i < 0 || i >= len(ins) {
		return nil
	}
	return ins[i]
}

// upstreamOf returns host:port of a postgres:// URL.
func upstreamOf(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("PostgreSQL URL %q: want postgres://user@host:port/database", redact(rawURL))
	}
	host, port := u.Hostname(), u.Port()
	if host == "" || strings.HasPrefix(host, "/") {
		return "", fmt.Errorf("PostgreSQL URL %q: want a TCP host:port (the launcher proxies it), not a unix socket", redact(rawURL))
	}
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(host, port), nil
}

func withHost(rawURL, hostport string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.Host = hostport
	return u.String()
}

func withDatabase(rawURL, db string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.Path = "/" + db
	return u.String()
}

func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// apachePort picks the Apache broker's port and the address it advertises:
// its own (DirectKafka: KafkaPort, or a free one) or that of a proxy in
// front of it, started here.
func (s *Stack) apachePort() (port int, advertised string, err error) {
	if s.opts.DirectKafka && s.opts.KafkaPort != 0 {
		return s.opts.KafkaPort, listenAddr(s.opts.KafkaPort), nil
	}
	if port, err = freePort(); err != nil {
		return 0, "", err
	}
	if s.opts.DirectKafka {
		return port, listenAddr(port), nil
	}
	proxy, err := faultproxy.New(ProxyKafka, listenAddr(s.opts.KafkaPort), listenAddr(port), s.quiet)
	if err != nil {
		return 0, "", kafkaProxyError(s.opts.KafkaPort, err)
	}
	s.proxies[ProxyKafka] = proxy
	return port, proxy.Addr(), nil
}

func listenAddr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
