// Package floor measures the floor of a usage fact: against one throwaway
// PostgreSQL cluster with the services' durability (fsync and
// synchronous_commit on) and their real schemas (each service's migrations
// with the outbox, inbox and idempotency sets, as the services migrate), it
// does exactly the database work the design needs per fact, batched as the
// services batch, and nothing else: no HTTP, no Kafka, no envelope
// decoding, no metrics. What it measures is the CPU PostgreSQL spends per
// fact (the postmaster and its children, from /proc) and, apart, this
// client's. Decision 0017 says which writes are there and why.
//
// The services' own statements are read from their queries.sql files (so
// a change there changes the floor); the outbox's and inbox's are the
// constants pkg/outbox and pkg/inbox send (outbox.AppendStatement,
// inbox.PlainClaimStatement, ...).
package floor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/e2e/procstat"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/testkit/pgcluster"
)

// Config is one floor run.
type Config struct {
	// Facts is how many facts are measured (after the warm-up).
	Facts int
	// Batch is the facts of one request, one relay round and one consumed
	// batch (500: the load tool's batch, outbox.Config.BatchSize and
	// inbox.RunnerConfig.BatchSize).
	Batch int
	// Warmup is how many facts run before the measurement starts.
	Warmup int
	// FoldEvery is how many batches pass between two folds of query's
	// summary deltas (query folds every second: 2 batches is 1,000 facts/s).
	FoldEvery int
	// Out receives progress lines (none when nil).
	Out io.Writer
	// Logger receives the cluster's messages (none when nil).
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Facts <= 0 {
		c.Facts = 60_000
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	}
	if c.FoldEvery <= 0 {
		c.FoldEvery = 2
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Result is one run's figures. CPU is in milliseconds; per fact, in
// CPU-milliseconds per fact.
type Result struct {
	Started          time.Time          `json:"started"`
	Facts            int                `json:"facts"`
	Batch            int                `json:"batch"`
	FoldEvery        int                `json:"foldEveryBatches"`
	Seconds          float64            `json:"seconds"`
	FactsPerSec      float64            `json:"factsPerSecond"`
	PostgresMS       float64            `json:"postgresCpuMs"`
	PostgresPerFact  float64            `json:"postgresCpuMsPerFact"`
	ClientMS         float64            `json:"clientCpuMs"`
	ClientPerFact    float64            `json:"clientCpuMsPerFact"`
	BackendPerFact   map[string]float64 `json:"backendCpuMsPerFact"` // per service database's connection
	BackgroundMS     float64            `json:"backgroundCpuMs"`     // postmaster, WAL writer, checkpointer, autovacuum, ...
	MachineBusyShare float64            `json:"machineBusyShare"`    // of all cores over the run, everyone's work included
	Commits          int                `json:"commitsPerBatch"`
	Conditions       string             `json:"conditions"`
}

// Run starts a cluster, migrates the four databases a fact touches, runs
// the warm-up and the measured facts, and stops the cluster.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	qs, err := readQueries(root,
		"services/usage/internal/db/queries.sql", "services/billing/internal/db/queries.sql",
		"services/invoice/internal/db/queries.sql", "services/query/internal/db/queries.sql")
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(cfg.Out, "==> starting a throwaway PostgreSQL cluster (fsync on, synchronous_commit on)")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = cluster.Remove(sctx)
	}()
	specs := map[string]service.Spec{"usage": usage.Spec, "billing": billing.Spec, "invoice": invoice.Spec, "query": query.Spec}
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	for _, name := range serviceNames {
		if err := cluster.CreateDatabase(ctx, name); err != nil {
			return nil, err
		}
		if err := pgmigrate.Up(cluster.URL(name), specs[name].Sets()...); err != nil {
			return nil, fmt.Errorf("migrate %s: %w", name, err)
		}
		if err := ensureParts(ctx, cluster.URL(name), specs[name].MonthTables); err != nil {
			return nil, fmt.Errorf("create the partitions of %s: %w", name, err)
		}
		c, err := pgx.Connect(ctx, cluster.URL(name))
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", name, err)
		}
		conns[name] = c
	}
	w, err := newWorkload(ctx, cfg, qs, conns)
	if err != nil {
		return nil, err
	}
	if cfg.Warmup > 0 {
		fmt.Fprintf(cfg.Out, "==> warm-up: %d facts\n", cfg.Warmup)
		if err := w.facts(ctx, cfg.Warmup, nil); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	// A pause between the warm-up and the window; whatever the background
	// processes (autovacuum, the WAL writer) do during the window is counted.
	time.Sleep(time.Second)

	postmaster := procstat.PostmasterPID(cluster.Dir() + "/data")
	if postmaster == 0 {
		return nil, fmt.Errorf("no postmaster.pid in %s/data", cluster.Dir())
	}
	backends := map[string]int{}
	for name, c := range conns {
		backends[name] = int(c.PgConn().PID())
	}
	before, err := readCPU(postmaster, backends)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Out, "==> measuring: %d facts in batches of %d, query folding every %d batches\n", cfg.Facts, cfg.Batch, cfg.FoldEvery)
	started := time.Now()
	if err := w.facts(ctx, cfg.Facts, cfg.Out); err != nil {
		return nil, err
	}
	took := time.Since(started)
	after, err := readCPU(postmaster, backends)
	if err != nil {
		return nil, err
	}
	return result(cfg, started, took, before, after, w.commitsPerBatch), nil
}

// serviceNames are the databases one fact touches (meter's is not).
var serviceNames = []string{"usage", "billing", "invoice", "query"}

// cpu is one reading of the ticks a run is measured by.
type cpu struct {
	postgres uint64
	backends map[string]uint64
	client   uint64
	machine  procstat.Machine
}

func readCPU(postmaster int, backends map[string]int) (cpu, error) {
	var c cpu
	var err error
	if c.postgres, err = procstat.Tree(postmaster); err != nil {
		return c, fmt.Errorf("read postgres cpu: %w", err)
	}
	c.backends = map[string]uint64{}
	for name, pid := range backends {
		s, err := procstat.ReadStat(pid)
		if err != nil {
			return c, fmt.Errorf("read the cpu of %s's backend: %w", name, err)
		}
		c.backends[name] = s.Own()
	}
	self, err := procstat.ReadStat(0)
	if err != nil {
		return c, fmt.Errorf("read own cpu: %w", err)
	}
	c.client = self.Own()
	if c.machine, err = procstat.ReadMachine(); err != nil {
		return c, err
	}
	return c, nil
}

func result(cfg Config, started time.Time, took time.Duration, before, after cpu, commits int) *Result {
	n := float64(cfg.Facts)
	r := &Result{
		Started: started.UTC(), Facts: cfg.Facts, Batch: cfg.Batch, FoldEvery: cfg.FoldEvery,
		Seconds: took.Seconds(), FactsPerSec: n / took.Seconds(),
		PostgresMS:     procstat.Millis(after.postgres - before.postgres),
		ClientMS:       procstat.Millis(after.client - before.client),
		BackendPerFact: map[string]float64{}, Commits: commits,
		Conditions: "one client, one connection per service database, statements in sequence; PostgreSQL from pgcluster (fsync on, synchronous_commit on)",
	}
	r.PostgresPerFact = r.PostgresMS / n
	r.ClientPerFact = r.ClientMS / n
	r.BackgroundMS = r.PostgresMS
	for name, t := range after.backends {
		ms := procstat.Millis(t - before.backends[name])
		r.BackendPerFact[name] = ms / n
		r.BackgroundMS -= ms
	}
	busy := float64(after.machine.Busy - before.machine.Busy)
	if all := busy + float64(after.machine.Idle-before.machine.Idle); all > 0 {
		r.MachineBusyShare = busy / all
	}
	return r
}

// ensureParts creates the partitions a service in its steady state has
// (pkg/service): inbox_event's weeks and outbox_event's days still within
// their default retention (14 days, a day) and ahead of now, and the months
// of the service's own tables (Spec.MonthTables), so the rows land in their
// partitions and the inbox's slot lookup probes as many partitions as it
// does in service.
func ensureParts(ctx context.Context, databaseURL string, tables []monthpart.Table) error {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	now := time.Now()
	for _, from := range []time.Time{now.Add(-14 * 24 * time.Hour), now.Add(-7 * 24 * time.Hour), now} {
		if _, err := inbox.EnsureParts(ctx, pool, from); err != nil {
			return err
		}
	}
	for _, from := range []time.Time{now.Add(-24 * time.Hour), now} {
		if _, err := outbox.EnsureParts(ctx, pool, from); err != nil {
			return err
		}
	}
	for _, tb := range tables {
		if _, err := tb.Ensure(ctx, pool, time.Now()); err != nil {
			return err
		}
	}
	return nil
}
