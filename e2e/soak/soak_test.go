//go:build soak

package soak_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/soak"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
)

// `make soak` (go test -tags soak ./e2e/soak/): SOAK_DURATION (default 1h),
// SOAK_RATE (facts/s, default 1000), SOAK_SEED (replays a run's faults;
// drawn and printed when unset), SOAK_SAMPLE (default 5s), SOAK_CLOSE_EVERY
// (default 15m: how often billing's scheduler closes a period under the
// moved clock, once at half time in a shorter run; 0 closes periods only at
// the end), SOAK_OUT (the directory report.md and soak.svg are written to,
// default bin/soak).
func TestSoak(t *testing.T) {
	cfg := soak.Config{Duration: time.Hour, Rate: 1000, Sample: 5 * time.Second, Progress: progress, CloseEvery: 15 * time.Minute}
	if v := os.Getenv("SOAK_CLOSE_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || (d != 0 && d < 2*time.Minute) {
			t.Fatalf("SOAK_CLOSE_EVERY=%q: want 0 or a duration of at least 2m", v)
		}
		cfg.CloseEvery = d
	}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 2*time.Minute {
			t.Fatalf("SOAK_DURATION=%q: want a duration of at least 2m", v)
		}
		cfg.Duration = d
	}
	if v := os.Getenv("SOAK_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("SOAK_RATE=%q: want facts per second, at least 10", v)
		}
		cfg.Rate = n
	}
	if v := os.Getenv("SOAK_SAMPLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			t.Fatalf("SOAK_SAMPLE=%q: want a duration of at least 1s", v)
		}
		cfg.Sample = d
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: want an unsigned integer", v)
		}
		cfg.Seed = n
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	out := os.Getenv("SOAK_OUT")
	if out == "" {
		out = filepath.Join(repoRoot(t), "bin", "soak")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	progress("seed %d (SOAK_SEED=%d replays these faults), %s at %d facts/s, report in %s", cfg.Seed, cfg.Seed, cfg.Duration, cfg.Rate, out)

	bin := stacktest.Binaries(t)
	opts, err := stack.FromEnv(stack.Options{Kafka: stack.KafkaApache})
	if err != nil {
		t.Fatal(err)
	}
	opts.BinDir = bin
	// Short retention, so the purges run during the soak and their
	// progress is watched: published outbox rows after 5 minutes, decided
	// inbox events and idempotency keys after 20 (the defaults, 24 hours
	// and 14 days, would purge nothing in an hour). 20 minutes is longer
	// than any redelivery a fault causes here.
	// The webhook endpoints it registers are receivers in the test
	// process: plain http on loopback, which invoice refuses by default.
	opts.Env = map[string]string{"RELAY_RETENTION": "5m", "INBOX_RETENTION": "20m", "IDEMPOTENCY_TTL": "20m",
		"WEBHOOK_ALLOW_NETS": "127.0.0.0/8,::1/128", "WEBHOOK_ALLOW_HTTP": "true"}
	// Each service's heap profile, read after warm-up and at the end of
	// the load (a series that grows is then told from a working set
	// that settles by what holds the memory).
	cfg.Pprof, cfg.Out = map[string]string{}, out
	for _, name := range stack.Services {
		if opts.ServiceEnv == nil {
			opts.ServiceEnv = map[string]map[string]string{}
		}
		if opts.ServiceEnv[name] == nil {
			opts.ServiceEnv[name] = map[string]string{}
		}
		addr := opts.ServiceEnv[name]["PPROF_ADDR"]
		if addr == "" {
			addr = freeAddr(t)
			opts.ServiceEnv[name]["PPROF_ADDR"] = addr
		}
		cfg.Pprof[name] = addr
	}
	// The services' clock (decision 0015), which the soak moves past a
	// period's end plus grace for the scheduler to close it; the services
	// accept the offset file as they run with the development key.
	if cfg.CloseEvery > 0 {
		clk, err := scenario.NewOffsetClock(filepath.Join(t.TempDir(), "clock-offset"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Clock = clk
		opts.Env["CLOCK_OFFSET_FILE"] = clk.Path
	}
	opts.PostgresFast = true // nothing kills PostgreSQL itself here
	opts.Logger = stack.ConsoleLogger(os.Stderr)
	started := time.Now().UTC()
	s, err := stack.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := chaos.NewHarness(t.Context(), s, progress)
	if err != nil {
		_ = s.Stop(t.Context())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		if t.Failed() {
			s.Keep()
			t.Logf("logs kept in %s", filepath.Join(s.Dir(), "logs"))
		}
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop the stack: %v", err)
		}
	})

	res, err := soak.Run(t.Context(), h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kafka := "a real Apache Kafka broker (KAFKA=apache)"
	if s.Broker() == nil {
		kafka = "Kafka " + opts.Kafka + " (broker-kill faults fail without the Apache broker)"
	}
	c := soak.Conditions{Commit: commit(), Kafka: kafka, Started: started.Format("2006-01-02 15:04 UTC"),
		Machine: fmt.Sprintf("%d cores, %s", runtime.NumCPU(), loadAverage())}
	svg, err := os.Create(filepath.Join(out, "soak.svg"))
	if err != nil {
		t.Fatal(err)
	}
	tMax := cfg.Duration.Seconds() + 60
	if err := soak.WriteSVG(svg, res.Title(), fmt.Sprintf("%s; %s; started %s", c.Kafka, c.Machine, c.Started), res.Panels(), res.Bands(), tMax); err != nil {
		t.Fatal(err)
	}
	svg.Close()
	md, err := os.Create(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	res.WriteMarkdown(md, c, "soak.svg")
	md.Close()
	progress("report: %s, plot: %s", filepath.Join(out, "report.md"), filepath.Join(out, "soak.svg"))
	for _, f := range res.Flat {
		progress("%s", f)
	}
	for _, p := range res.Problems {
		t.Error(p)
	}
	progress("seed %d: %s", cfg.Seed, res.Title())
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s soak: %s\n", time.Now().Format("15:04:05.0"), fmt.Sprintf(format, args...))
}

func repoRoot(t *testing.T) string {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("find the repository: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	return "load average " + strings.Join(f[:3], " ") + " at the end"
}
