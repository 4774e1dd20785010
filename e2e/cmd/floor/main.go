// Command floor measures the floor of a usage fact: the CPU PostgreSQL
// spends on exactly the database work the design needs per fact (usage's
// fact and outbox rows, every relay's claim and mark, every inbox decision,
// the charge, the invoice's charge, query's projections and their fold),
// batched as the services batch, on a throwaway cluster with fsync on.
// docs/decisions/0017-the-floor-of-a-fact.md says what is in it and why.
//
//	make floor                         # 60,000 facts, once
//	make floor ARGS='-runs 3'          # three runs on fresh clusters, the median
//
// It prints the figures and writes them to -out (default bin/floor.json),
// where the load tool reads the floor to report its ratio (load -floor).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/usagebilling/billing/e2e/floor"
)

// File is what -out holds: the median run and every run.
type File struct {
	// PostgresPerFact is the floor: the median run's PostgreSQL CPU-ms per
	// fact. The load tool divides its figures by it.
	PostgresPerFact float64         `json:"postgresCpuMsPerFact"`
	ClientPerFact   float64         `json:"clientCpuMsPerFact"`
	Median          *floor.Result   `json:"median"`
	Runs            []*floor.Result `json:"runs"`
	Host            string          `json:"host"`
	LoadAverage     string          `json:"loadAverage"` // /proc/loadavg at the end
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}

func run(ctx context.Context) int {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	var cfg floor.Config
	fs.IntVar(&cfg.Facts, "facts", 60_000, "facts measured per run (20-60 s on 2 cores)")
	fs.IntVar(&cfg.Batch, "batch", 500, "facts per request, relay round and consumed batch (the services' 500)")
	fs.IntVar(&cfg.Warmup, "warmup", 5_000, "facts run before the measurement (plans cached, tables not empty)")
	fs.IntVar(&cfg.FoldEvery, "fold-every", 2, "batches between two folds of query's summary deltas (query folds every second: 2 is 1,000 facts/s)")
	runs := fs.Int("runs", 1, "runs, each on a fresh cluster; the median by PostgreSQL CPU per fact is the floor")
	out := fs.String("out", "bin/floor.json", "file the figures are written to (the load tool's -floor reads it); empty: none")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "floor: -runs: want at least 1")
		return 2
	}
	cfg.Out = os.Stdout
	var results []*floor.Result
	for i := range *runs {
		if *runs > 1 {
			fmt.Printf("==> run %d of %d\n", i+1, *runs)
		}
		r, err := floor.Run(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			return 1
		}
		results = append(results, r)
		write(os.Stdout, r)
	}
	sorted := slices.Clone(results)
	slices.SortFunc(sorted, func(a, b *floor.Result) int {
		switch {
		case a.PostgresPerFact < b.PostgresPerFact:
			return -1
		case a.PostgresPerFact > b.PostgresPerFact:
			return 1
		}
		return 0
	})
	med := sorted[len(sorted)/2]
	host, _ := os.Hostname()
	load, _ := os.ReadFile("/proc/loadavg")
	f := File{PostgresPerFact: med.PostgresPerFact, ClientPerFact: med.ClientPerFact, Median: med, Runs: results,
		Host: host, LoadAverage: strings.TrimSpace(string(load))}
	if *runs > 1 {
		var each []string
		for _, r := range results {
			each = append(each, fmt.Sprintf("%.3f", r.PostgresPerFact))
		}
		fmt.Printf("\nmedian of %d runs: PostgreSQL %.3f CPU-ms per fact (runs: %s), client %.3f\n",
			len(results), med.PostgresPerFact, strings.Join(each, ", "), med.ClientPerFact)
	}
	fmt.Printf("load average at the end: %s\n", f.LoadAverage)
	if *out != "" {
		if err := save(*out, f); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			return 1
		}
		fmt.Printf("written to %s (load -floor %s reads it)\n", *out, *out)
	}
	return 0
}

func write(w *os.File, r *floor.Result) {
	fmt.Fprintf(w, "\nFLOOR OF A FACT (%s)\n", r.Started.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "facts\t%d in batches of %d, %.1fs (%.0f facts/s), %d commits per batch + a fold every %d batches\n",
		r.Facts, r.Batch, r.Seconds, r.FactsPerSec, r.Commits, r.FoldEvery)
	fmt.Fprintf(tw, "PostgreSQL\t%.3f CPU-ms per fact\t(postmaster and children, %.0f ms in all)\n", r.PostgresPerFact, r.PostgresMS)
	for _, name := range []string{"usage", "billing", "invoice", "query"} {
		fmt.Fprintf(tw, "  %s's backend\t%.3f\n", name, r.BackendPerFact[name])
	}
	fmt.Fprintf(tw, "  background\t%.3f\t(WAL writer, checkpointer, autovacuum, ...)\n", r.BackgroundMS/float64(r.Facts))
	fmt.Fprintf(tw, "client\t%.3f CPU-ms per fact\t(this process: pgx encoding, ids; %.0f ms)\n", r.ClientPerFact, r.ClientMS)
	fmt.Fprintf(tw, "machine\t%.0f%% of all cores busy over the run, everyone's work included\n", 100*r.MachineBusyShare)
	tw.Flush()
}

func save(path string, f File) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
