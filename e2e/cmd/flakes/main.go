// Command flakes hunts for tests that fail when the machine is slow: it runs
// every package's tests several times, and the tagged system suites (chaos,
// money, hostile) a few times each, while busy loops hold every core, and
// reports each failure with the output that explains it.
//
//	make flakes                                  # -count 5 -suite-count 3, every suite
//	make flakes ARGS='-count 2 -suites unit,money'
//
// A test that fails here is wrong the same way it would be wrong in CI on a
// loaded machine: it waits for time instead of a signal, or bounds a figure
// by something other than what it observed. The report goes to the terminal
// and to -out/report.md; the exit status is 1 when anything failed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A suite is one `go test` invocation.
type suite struct {
	name   string
	args   []string // after `go test -json -count=N`
	env    []string
	perRun time.Duration // the timeout of one run of the suite
	tagged bool          // runs -suite-count times, not -count
}

var suites = []suite{
	{name: "unit", args: []string{"github.com/usagebilling/billing/..."}, perRun: 30 * time.Minute},
	{name: "apache", args: []string{"./pkg/outbox/", "./pkg/inbox/"}, env: []string{"TEST_KAFKA=apache"}, perRun: 20 * time.Minute},
	{name: "chaos", args: []string{"-tags", "chaos", "./e2e/chaos/"}, env: []string{"KAFKA=apache"}, perRun: 40 * time.Minute, tagged: true},
	{name: "money", args: []string{"-tags", "money", "-run", "^TestMoney$", "./e2e/money/"}, env: []string{"MONEY_OPS=1000"}, perRun: 40 * time.Minute, tagged: true},
	{name: "hostile", args: []string{"-tags", "hostile", "-run", "^TestHostileInput$", "./e2e/hostile/"}, perRun: 20 * time.Minute, tagged: true},
}

func main() {
	count := flag.Int("count", 5, "runs of every test of the unit and apache suites")
	suiteCount := flag.Int("suite-count", 3, "runs of each tagged system suite (chaos, money, hostile)")
	names := flag.String("suites", "unit,apache,chaos,money,hostile", "the suites to run, comma-separated")
	hogs := flag.Int("stress", runtime.NumCPU(), "busy loops holding the cores while the tests run (0: none)")
	out := flag.String("out", "", "directory for report.md and each suite's go test -json log (default: a new temporary directory)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := *out
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "flakes-"); err != nil {
			fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		fatal(err)
	}
	var chosen []suite
	for _, n := range strings.Split(*names, ",") {
		i := slices.IndexFunc(suites, func(s suite) bool { return s.name == strings.TrimSpace(n) })
		if i < 0 {
			fatal(fmt.Errorf("unknown suite %q (have unit, apache, chaos, money, hostile)", n))
		}
		chosen = append(chosen, suites[i])
	}

	spin := stress(*hogs)
	defer spin.Stop()
	rep := report{Started: time.Now(), Hogs: *hogs, Count: *count, SuiteCount: *suiteCount, Commit: commit()}
	for _, s := range chosen {
		n := *count
		if s.tagged {
			n = *suiteCount
		}
		fmt.Fprintf(os.Stderr, "flakes: %s suite, %d run(s), %d busy loop(s), log %s\n", s.name, n, *hogs, filepath.Join(dir, s.name+".json"))
		res, err := runSuite(ctx, s, n, filepath.Join(dir, s.name+".json"))
		if err != nil {
			fatal(err)
		}
		rep.Suites = append(rep.Suites, res)
		if ctx.Err() != nil {
			break
		}
	}
	rep.Finished = time.Now()
	rep.Load = loadavg()
	text := rep.markdown()
	fmt.Print(text)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(text), 0o644); err != nil {
		fatal(err)
	}
	fmt.Fprintf(os.Stderr, "flakes: report in %s\n", filepath.Join(dir, "report.md"))
	if rep.failures() > 0 || ctx.Err() != nil {
		os.Exit(1)
	}
}

// hogs are goroutines that spin until stopped, one per core asked for.
type hogs struct {
	done chan struct{}
	wg   sync.WaitGroup
}

func stress(n int) *hogs {
	h := &hogs{done: make(chan struct{})}
	var sink atomic.Uint64
	for range n {
		h.wg.Go(func() {
			var x uint64
			for {
				for range 1 << 20 {
					x = x*6364136223846793005 + 1442695040888963407
				}
				sink.Store(x)
				select {
				case <-h.done:
					return
				default:
				}
			}
		})
	}
	return h
}

func (h *hogs) Stop() {
	select {
	case <-h.done:
	default:
		close(h.done)
	}
	h.wg.Wait()
}

// A testKey names one test of one package ("" for the package itself: a
// build failure, a panic outside a test or a timeout).
type testKey struct{ pkg, test string }

type outcome struct {
	runs, fails, skips int
	firstFailure       []string // the output of the first failed run, trimmed
}

type suiteResult struct {
	Name    string
	Runs    int
	Elapsed time.Duration
	Exit    string
	Tests   map[testKey]*outcome
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func runSuite(ctx context.Context, s suite, n int, logPath string) (suiteResult, error) {
	res := suiteResult{Name: s.name, Runs: n, Tests: map[testKey]*outcome{}}
	log, err := os.Create(logPath)
	if err != nil {
		return res, err
	}
	defer log.Close()
	args := append([]string{"test", "-json", fmt.Sprintf("-count=%d", n), "-timeout", (s.perRun * time.Duration(n)).String()}, s.args...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stderr = os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start go %s: %w", strings.Join(args, " "), err)
	}
	// Output is kept per running test and dropped when it passes, so memory
	// stays bounded by what the failing runs printed.
	running := map[testKey][]string{}
	sc := bufio.NewScanner(io.TeeReader(stdout, log))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // go test prints build errors as text
		}
		k := testKey{e.Package, e.Test}
		switch e.Action {
		case "output":
			running[k] = keepTail(append(running[k], strings.TrimRight(e.Output, "\n")), 60)
		case "pass", "fail", "skip":
			if e.Action == "skip" && e.Test == "" {
				delete(running, k)
				continue // a package without tests
			}
			o := res.Tests[k]
			if o == nil {
				o = &outcome{}
				res.Tests[k] = o
			}
			o.runs++
			switch e.Action {
			case "fail":
				o.fails++
				if o.firstFailure == nil {
					o.firstFailure = running[k]
				}
			case "skip":
				o.skips++
			}
			delete(running, k)
		}
	}
	err = cmd.Wait()
	res.Elapsed = time.Since(start)
	res.Exit = "ok"
	if err != nil {
		res.Exit = err.Error()
	}
	if err != nil && res.failures() == 0 {
		// go test failed without a test or package failing: a build error or a
		// kill. Count it, so the report never reads clean.
		res.Tests[testKey{pkg: s.name, test: "(go test)"}] = &outcome{runs: 1, fails: 1, firstFailure: []string{err.Error()}}
	}
	return res, sc.Err()
}

func keepTail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

func (r suiteResult) failures() int {
	n := 0
	for _, o := range r.Tests {
		n += o.fails
	}
	return n
}

type report struct {
	Started, Finished time.Time
	Hogs              int
	Count, SuiteCount int
	Commit            string
	Load              string
	Suites            []suiteResult
}

func (r report) failures() int {
	n := 0
	for _, s := range r.Suites {
		n += s.failures()
	}
	return n
}

func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Flake hunt, %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Commit %s; %d cores, %d busy loop(s) holding them; unit and apache suites %d runs of every test, tagged suites %d runs each; %s in all; load average at the end %s.\n\n",
		r.Commit, runtime.NumCPU(), r.Hogs, r.Count, r.SuiteCount, r.Finished.Sub(r.Started).Round(time.Second), r.Load)
	b.WriteString("| suite | runs | tests | test runs | failed | skipped | time | go test |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Suites {
		tests, runs, fails, skips := 0, 0, 0, 0
		for k, o := range s.Tests {
			if k.test != "" {
				tests++
			}
			runs += o.runs
			fails += o.fails
			skips += o.skips
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %s |\n", s.Name, s.Runs, tests, runs, fails, skips, s.Elapsed.Round(time.Second), s.Exit)
	}
	if r.failures() == 0 {
		b.WriteString("\nNo failure.\n")
	}
	for _, s := range r.Suites {
		var keys []testKey
		for k, o := range s.Tests {
			if o.fails > 0 {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(a, b testKey) int { return strings.Compare(a.pkg+" "+a.test, b.pkg+" "+b.test) })
		for _, k := range keys {
			o := s.Tests[k]
			name := k.test
			if name == "" {
				name = "(package)"
			}
			fmt.Fprintf(&b, "\n## %s: %s %s failed %d of %d runs\n\n```\n%s\n```\n", s.Name, k.pkg, name, o.fails, o.runs, strings.Join(o.firstFailure, "\n"))
		}
	}
	return b.String()
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "flakes:", err)
	os.Exit(2)
}
