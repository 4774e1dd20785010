// Command load drives usage facts into the system over HTTP and reports
// what it really does: facts accepted per second, facts charged end to end
// (as the query service shows them), the lag, the usage -> query latency,
// the outbox relay and inbox latencies from each service's /metrics, and
// the CPU per fact charged: all-in (the machine's busy CPU from /proc/stat,
// first send to last charge) and, when it started the stack, per process
// group (each service, PostgreSQL, the load tool with the embedded broker)
// from /proc/<pid>/stat, with their ratios to the floor of `make floor`
// (read from bin/floor.json, or -floor-ms). It exits non-zero if an accepted fact was lost or charged twice, or if
// usage answered a fact with a 5xx.
//
//	make load                                 # -self: starts the stack here, runs 1m, stops it
//	make load ARGS='-duration 20s -rate 500'
//	go run ./e2e/cmd/load -usage http://127.0.0.1:8082 ... -dev-key -tenants 10 -dominant 0.5
//
// With no URL flag it starts the whole system in this process (e2e/stack,
// like `make demo`; the stack's environment variables apply: KAFKA=apache,
// STACK_INSTANCES, ...) and stops it at the end. The report goes to the
// terminal and to -out (report.txt, report.json, load.svg).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/usagebilling/billing/e2e/load"
	"github.com/usagebilling/billing/e2e/stack"
)

func main() {
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}

func run(ctx context.Context) int {
	f, code := parseFlags(os.Args[1:])
	if f == nil {
		return code
	}
	cfg := f.cfg
	cfg.Describe = map[string]string{}
	cfg.Out = os.Stdout

	dir := f.out
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "load-*"); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			return 1
		}
	}

	var s *stack.Stack
	if f.self {
		var stop func()
		s, stop, code = startStack(ctx, &cfg)
		if s == nil {
			return code
		}
		defer stop()
		cfg.Processes = stackGroups(s)
	} else {
		cfg.Describe["stack"] = "given by URL (not started here)"
		cfg.Describe["kafka"] = "unknown (not started here)"
		cfg.NoProcesses = "no figure per process group: this stack was given by URL, not started here, so the load tool " +
			"knows none of its processes (which may not even run on this machine); the all-in figure is this machine's busy CPU, whoever used it"
	}
	return runLoad(ctx, cfg, s, dir)
}

// flags are the command's flags, parsed.
type flags struct {
	cfg       load.Config
	self      bool
	out       string
	floorMS   float64
	floorFile string
}

// parseFlags parses args. A nil result ends the command with code: 0 after
// -help, 2 for a usage error (printed).
func parseFlags(args []string) (*flags, int) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	urls := map[string]*string{}
	for i, s := range load.Services {
		urls[s] = fs.String(s, fmt.Sprintf("http://127.0.0.1:%d", 8081+i), "base URL of the "+s+" service")
	}
	f := &flags{}
	cfg := &f.cfg
	fs.BoolVar(&f.self, "self", false, "start the whole stack in this process, run against it, stop it (the default when no URL flag is given)")
	fs.StringVar(&cfg.Token, "token", "", "bearer token for every call (an operator token, or a tenant token: then its tenant is the one tenant)")
	fs.BoolVar(&cfg.DevKey, "dev-key", false, "mint a tenant token per tenant with the environment's signer: the published development key unless AUTH_SIGNING_KEY, AUTH_SIGNING_KEY_ID and AUTH_ISSUER name another (the default without -token)")
	fs.IntVar(&cfg.Tenants, "tenants", 1, "number of tenants")
	fs.Float64Var(&cfg.Dominant, "dominant", -1, "share of the facts that go to tenant 0 (e.g. 0.5); the rest spread evenly; default: all even")
	fs.Float64Var(&cfg.Rate, "rate", 0, "offered facts per second; 0 sends flat out")
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "how long to send")
	fs.Int64Var(&cfg.Facts, "facts", 0, "stop sending after this many facts (0: send for -duration; -duration still bounds it)")
	fs.IntVar(&cfg.Batch, "batch", 500, "facts per POST usage:batch (1-1000)")
	fs.IntVar(&cfg.Properties, "properties", 0, "properties per fact (0-16), each a name p<i> with one of 50 values")
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "requests in flight")
	fs.DurationVar(&cfg.Drain, "drain", 5*time.Minute, "how long to wait, once sending stops, for every accepted fact to be counted and charged in query")
	fs.BoolVar(&cfg.Close, "close", false, "after the drain, close every tenant's period and time its invoice: issued, then visible in query")
	fs.DurationVar(&cfg.CloseTimeout, "close-timeout", 5*time.Minute, "how long to wait for each closed period's invoice to be issued, and then to show in query")
	fs.IntVar(&cfg.Alerts, "alerts", 0, "define this many usage alerts per tenant (0-50) with a webhook receiver in this process, and report the latency from the commit of each crossing charge to the first delivery of its alert.triggered (the target: p99 <= 2s at 1,000 facts/s)")
	fs.Int64Var(&cfg.AlertStep, "alert-step", 0, "facts between two alerts' thresholds (0: the facts a tenant is expected to send divided by one more than -alerts; 1,000 flat out)")
	fs.DurationVar(&cfg.Poll, "poll", 250*time.Millisecond, "poll every tenant's query summary this often (never more than 50 polls/s in all)")
	fs.StringVar(&cfg.RunID, "run-id", "", "prefix of the tenant ids and source event ids (default load-<UTC time>)")
	fs.StringVar(&f.out, "out", "", "directory for report.txt, report.json and load.svg (default a new directory under $TMPDIR)")
	fs.Float64Var(&f.floorMS, "floor-ms", 0, "the floor, PostgreSQL CPU-ms per fact, to report the CPU per fact against (overrides -floor)")
	fs.StringVar(&f.floorFile, "floor", "bin/floor.json", "file make floor writes: its postgresCpuMsPerFact is the floor the CPU per fact is reported against, unless -floor-ms is given (no ratio when the file is missing)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "load: unexpected arguments %q\n", fs.Args())
		return nil, 2
	}
	if !f.resolve(fs, urls) {
		return nil, 2
	}
	if err := f.resolveFloor(); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		return nil, 2
	}
	return f, 0
}

// resolveFloor sets the floor of the CPU figures: -floor-ms, else the
// file of -floor when it exists.
func (f *flags) resolveFloor() error {
	if f.floorMS < 0 {
		return fmt.Errorf("-floor-ms %g: want CPU-ms per fact", f.floorMS)
	}
	if f.floorMS > 0 {
		f.cfg.Floor, f.cfg.FloorSource = f.floorMS, "-floor-ms"
		return nil
	}
	if f.floorFile == "" {
		return nil
	}
	b, err := os.ReadFile(f.floorFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("-floor: %w", err)
	}
	var fl struct {
		PostgresPerFact float64 `json:"postgresCpuMsPerFact"`
		Runs            []struct {
			Started time.Time `json:"started"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &fl); err != nil || fl.PostgresPerFact <= 0 {
		return fmt.Errorf("-floor %s: not a file of make floor (no postgresCpuMsPerFact): %v", f.floorFile, err)
	}
	f.cfg.Floor = fl.PostgresPerFact
	f.cfg.FloorSource = fmt.Sprintf("%s, median of %d run(s) of make floor", f.floorFile, len(fl.Runs))
	if n := len(fl.Runs); n > 0 {
		f.cfg.FloorSource += " of " + fl.Runs[n-1].Started.Format("2006-01-02 15:04 UTC")
	}
	return nil
}

// loadToolGroup names the load tool's own process: it holds the embedded
// broker (kfake) and the proxies when the stack runs them.
const loadToolGroup = "load tool (with the embedded broker and proxies)"

// stackGroups lists the processes of s by group, for the CPU per fact: each
// service's instances, PostgreSQL (the postmaster and its children), and
// this process (its own time only: its children are the services).
func stackGroups(s *stack.Stack) func() []load.ProcessGroup {
	return func() []load.ProcessGroup {
		pids := map[string][]int{}
		for _, p := range s.Processes() {
			name, _, _ := strings.Cut(p.Name, ".")
			pids[name] = append(pids[name], p.PID)
		}
		var out []load.ProcessGroup
		for _, name := range append(slices.Clone(load.Services), "postgres") {
			if len(pids[name]) > 0 {
				out = append(out, load.ProcessGroup{Name: name, PIDs: pids[name]})
			}
		}
		return append(out, load.ProcessGroup{Name: loadToolGroup, PIDs: []int{os.Getpid()}, OwnOnly: true})
	}
}

// resolve settles what the flags leave open: -self when no URL is given,
// the development key when no token is, and a tenant token's one tenant. It
// reports false after printing a usage error.
func (f *flags) resolve(fs *flag.FlagSet, urls map[string]*string) bool {
	urlGiven := false
	fs.Visit(func(fl *flag.Flag) {
		if _, ok := urls[fl.Name]; ok {
			urlGiven = true
		}
	})
	if f.self && urlGiven {
		fmt.Fprintln(os.Stderr, "load: -self starts its own stack: give it no URL flag")
		return false
	}
	if !urlGiven && !f.self {
		f.self = true
		fmt.Println("==> no service URL given: starting the whole stack in this process (-self); it is stopped at the end")
	}
	cfg := &f.cfg
	cfg.URLs = map[string]string{}
	for s, u := range urls {
		cfg.URLs[s] = *u
	}
	if cfg.Token == "" && !cfg.DevKey {
		cfg.DevKey = true
		fmt.Println("==> no -token: minting a tenant token per tenant with the environment's signer (-dev-key; the development key unless AUTH_SIGNING_KEY is set)")
	}
	if cfg.Token != "" {
		if t := load.TokenTenant(cfg.Token); t != "" {
			if cfg.Tenants != 1 {
				fmt.Fprintf(os.Stderr, "load: -token is a tenant token for %q, which reaches that tenant only: use -tenants 1, an operator token, or -dev-key\n", t)
				return false
			}
			cfg.TenantIDs = []string{t}
			fmt.Printf("==> -token is a tenant token: the one tenant is %s (its earlier usage is the baseline)\n", t)
		}
	}
	return true
}

// startStack starts the whole stack in this process (from the environment,
// as `make demo`), points cfg at it and describes it; stop stops it. A nil
// stack ends the command with code.
func startStack(ctx context.Context, cfg *load.Config) (s *stack.Stack, stop func(), code int) {
	// The receiver of -alerts is on http://127.0.0.1.
	opts, err := stack.FromEnv(stack.Options{Logger: stack.ConsoleLogger(os.Stdout),
		ServiceEnv: map[string]map[string]string{"invoice": {"WEBHOOK_ALLOW_NETS": "127.0.0.0/8,::1/128", "WEBHOOK_ALLOW_HTTP": "true"}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		return nil, nil, 2
	}
	began := time.Now()
	s, err = stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load: start the stack:", err)
		return nil, nil, 1
	}
	stop = func() {
		fmt.Println("==> stopping the stack")
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Stop(sctx); err != nil {
			fmt.Fprintln(os.Stderr, "load: stop the stack:", err)
		}
	}
	cfg.URLs = s.URLs()
	for _, svc := range s.Services() {
		if n := s.Instances(svc); n > 1 {
			if cfg.Instances == nil {
				cfg.Instances = map[string][]string{}
			}
			for i := range n {
				cfg.Instances[svc] = append(cfg.Instances[svc], s.URL(svc, i))
			}
		}
	}
	describeStack(cfg, opts, time.Since(began))
	return s, stop, 0
}

// runLoad runs the load and writes its report to the terminal and to dir;
// on failure it keeps the service logs of s (when started here).
func runLoad(ctx context.Context, cfg load.Config, s *stack.Stack, dir string) int {
	rep, err := load.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		if s != nil {
			s.Keep()
			fmt.Fprintf(os.Stderr, "load: service logs are kept in %s/logs\n", s.Dir())
		}
		return 1
	}
	fmt.Println()
	rep.WriteText(os.Stdout)
	if err := rep.WriteFiles(dir); err != nil {
		fmt.Fprintln(os.Stderr, "load: write the report:", err)
		return 1
	}
	fmt.Printf("\nreport: %s/report.txt, %s/report.json; plot: %s/load.svg\n", dir, dir, dir)
	if !rep.OK {
		if s != nil {
			s.Keep()
			fmt.Printf("service logs are kept in %s/logs\n", s.Dir())
		}
		return 1
	}
	return 0
}

func describeStack(cfg *load.Config, opts stack.Options, took time.Duration) {
	kafka := opts.Kafka
	if kafka == "" {
		kafka = stack.KafkaEmbedded
		if len(opts.KafkaBrokers) > 0 {
			kafka = stack.KafkaExternal
		}
	}
	direct := opts.DirectKafka || kafka == stack.KafkaExternal // no proxy in front of a cluster the stack did not start
	switch kafka {
	case stack.KafkaEmbedded:
		kafka += " (kfake, in the load tool's own process)"
	case stack.KafkaExternal:
		kafka += " " + strings.Join(opts.KafkaBrokers, ",")
	}
	parts := opts.Partitions
	if parts == 0 {
		parts = stack.DefaultPartitions
	}
	proxies := "toxiproxy in front of Kafka and each database"
	switch {
	case opts.DirectDB && direct:
		proxies = "no proxies: the databases and Kafka reached directly (STACK_DIRECT_DB, STACK_DIRECT_KAFKA)"
	case opts.DirectDB:
		proxies = "toxiproxy in front of Kafka, databases reached directly (STACK_DIRECT_DB)"
	case direct:
		proxies = "toxiproxy in front of each database, Kafka reached directly (STACK_DIRECT_KAFKA)"
	}
	durability := "durable (fsync on)"
	if opts.PostgresFast {
		durability = "fsync off"
	}
	cfg.Describe["stack"] = fmt.Sprintf("started here (-self, e2e/stack) in %s: throwaway PostgreSQL 15 (%s), %s, services as processes",
		took.Round(100*time.Millisecond), durability, proxies)
	cfg.Describe["kafka"] = kafka + ", " + strconv.Itoa(parts) + " partitions per topic"
	if len(opts.Instances) > 0 {
		var inst []string
		for _, s := range load.Services {
			if n := opts.Instances[s]; n > 0 {
				inst = append(inst, fmt.Sprintf("%s=%d", s, n))
			}
		}
		cfg.Describe["instances"] = strings.Join(inst, ",")
	}
	if opts.PostgresURL != "" {
		cfg.Describe["postgres"] = "existing server " + opts.PostgresURL
	}
	if v := os.Getenv(stack.EnvServiceEnv); v != "" {
		cfg.Describe["settings"] = v + " (STACK_SERVICE_ENV); the services' defaults otherwise"
	}
}
