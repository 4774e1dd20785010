//go:build containers

package containers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/load"
	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
)

// fault is one container killed under load and what proves it happened.
type fault struct {
	service  string
	killedAt time.Duration // since the load started
	down     time.Duration // from the kill to healthy again
	proof    []string      // what was observed
	problem  string        // why it is not proven, if it is not
}

// TestContainerChaos runs deploy/compose.yaml's core on the local images,
// drives usage facts into it over HTTP (package load: two tenants, a steady
// rate), and meanwhile SIGKILLs the billing container (docker kill), then
// the Kafka container, and starts each again. Then it requires that every
// accepted fact was counted and charged in query exactly once, that every
// closed period's invoice counts every charge, that every service's backlog
// drained, and that the operator's reconciliation of each period
// (GET /v1/operator/reconciliation) is empty. A kill that cannot be shown to
// have happened (the container did not die, or nothing saw the broker go)
// fails the test as "not proven".
func TestContainerChaos(t *testing.T) {
	root, err := stack.WorkspaceRoot()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := Signer() // load's and the operator's tokens
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("signing tokens with %s", signer)
	project := os.Getenv("COMPOSE_PROJECT")
	if project == "" {
		project = "usagebilling-chaos"
	}
	c := Compose{Root: root, Project: project}
	ctx := t.Context()
	_ = c.Down(ctx) // what an interrupted run left
	t.Logf("docker compose up (project %s): %s, waiting for every healthcheck", project, strings.Join(Core, " "))
	upBegan := time.Now()
	if err := c.Up(ctx); err != nil {
		t.Fatalf("compose up: %v (run `make compose-images` first: the images are local)", err)
	}
	t.Logf("up and healthy in %s", time.Since(upBegan).Round(time.Second))
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			for _, s := range []string{"usage", "billing", "kafka"} {
				t.Logf("last lines of %s:\n%s", s, c.Logs(cctx, s, 25))
			}
		}
		if err := c.Down(cctx); err != nil {
			t.Errorf("compose down: %v", err)
		}
	})

	urls := map[string]string{}
	for i, s := range load.Services {
		urls[s] = fmt.Sprintf("http://127.0.0.1:%d", 8081+i)
	}
	op := scenario.DevOperator(urls["query"], "chaos@ops.example")
	// DevKey: mint a token per tenant, by the environment's signer (here
	// the compose key; the field is named for the local stack's key).
	cfg := load.Config{
		URLs: urls, DevKey: true, RunID: "chaos-" + time.Now().UTC().Format("150405"),
		Tenants: 2, Dominant: -1, Rate: 100, Duration: 60 * time.Second, Batch: 25, Concurrency: 2,
		Drain: 4 * time.Minute, Close: true, CloseTimeout: 3 * time.Minute,
		Describe: map[string]string{"stack": "deploy/compose.yaml, local images", "kafka": "usagebilling/kafka:4.1.1"},
		Out:      &logWriter{t: t},
	}
	type outcome struct {
		rep *load.Report
		err error
	}
	done := make(chan outcome, 1)
	loadBegan := time.Now()
	go func() {
		rep, err := load.Run(ctx, cfg)
		done <- outcome{rep, err}
	}()
	since := func() time.Duration { return time.Since(loadBegan).Round(100 * time.Millisecond) }

	sleep(ctx, 10*time.Second)
	billing := killAndRestart(ctx, t, c, "billing", since, 8*time.Second, func(ctx context.Context, f *fault) {
		// The process is gone: its port refuses connections.
		if err := get(ctx, urls["billing"]+"/healthz"); err != nil {
			f.proof = append(f.proof, "its HTTP port refused: "+short(err))
		} else {
			f.problem = "billing still answered /healthz after docker kill"
		}
	})
	sleep(ctx, 5*time.Second)
	failedBefore := metricSum(ctx, urls["usage"], "outbox_failed_attempts_total", "")
	kafka := killAndRestart(ctx, t, c, "kafka", since, 15*time.Second, func(ctx context.Context, f *fault) {
		// The services see the broker gone: usage's relay cannot publish, so
		// its outbox holds the facts accepted meanwhile.
		var maxPending int64
		deadline := time.Now().Add(12 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if rec, err := op.RecoveryStatus(ctx); err == nil {
				maxPending = max(maxPending, rec["usage"].OutboxPending)
			}
			sleep(ctx, time.Second)
		}
		failed := metricSum(ctx, urls["usage"], "outbox_failed_attempts_total", "") - failedBefore
		if maxPending > 0 {
			f.proof = append(f.proof, fmt.Sprintf("usage's outbox held up to %d events unpublished", maxPending))
		}
		if failed > 0 {
			f.proof = append(f.proof, fmt.Sprintf("usage's relay counted %.0f failed sends", failed))
		}
		if maxPending == 0 && failed == 0 {
			f.problem = "no service showed the broker gone (usage's outbox never held an event, its relay never failed a send)"
		}
	})

	t.Logf("[%s] both faults injected; waiting for the load to end, drain, close every period and check", since())
	var out outcome
	select {
	case out = <-done:
	case <-ctx.Done():
		t.Fatal("interrupted")
	}
	if out.err != nil {
		t.Fatalf("load: %v", out.err)
	}
	rep := out.rep
	var sb strings.Builder
	rep.WriteText(&sb)
	t.Logf("load report:\n%s", sb.String())

	// Backlogs drained, and each closed period reconciles to nothing.
	var recovery map[string]scenario.Recovery
	deadline := time.Now().Add(time.Minute)
	for {
		recovery, err = op.RecoveryStatus(ctx)
		zero := err == nil
		for _, r := range recovery {
			zero = zero && r.Zero()
		}
		if zero || time.Now().After(deadline) {
			break
		}
		sleep(ctx, time.Second)
	}
	if err != nil {
		t.Errorf("recovery status: %v", err)
	}
	for name, r := range recovery {
		if !r.Zero() {
			t.Errorf("%s is left with %s", name, r)
		}
	}
	type recon struct {
		tenant, period string
		counts         string
		mismatches     int
	}
	var recons []recon
	for _, cl := range rep.Closed {
		rec, err := op.Reconcile(ctx, cl.Tenant, cl.Period)
		if err != nil {
			t.Errorf("reconcile %s %s: %v", cl.Tenant, cl.Period, err)
			continue
		}
		for _, m := range rec.Mismatches {
			t.Errorf("reconciliation of %s %s: %s %s %s", cl.Tenant, cl.Period, m.Kind, m.OriginEventId, m.Detail)
		}
		recons = append(recons, recon{cl.Tenant, cl.Period, fmt.Sprintf("usage %d, charges %d, invoice lines %d, query %d",
			rec.Counts.UsageFacts, rec.Counts.Charges, rec.Counts.InvoiceLines, rec.Counts.QueryUsage), len(rec.Mismatches)})
	}
	if len(rep.Closed) != cfg.Tenants {
		t.Errorf("%d periods closed, want one per tenant (%d)", len(rep.Closed), cfg.Tenants)
	}
	if !rep.OK {
		for _, f := range rep.Failures {
			t.Errorf("load: %s", f)
		}
	}
	lost := rep.Totals.Accepted - rep.Totals.Charged
	var duplicates float64
	for _, s := range []string{"billing", "invoice", "query"} {
		duplicates += metricSum(ctx, urls[s], "inbox_decisions_total", `outcome="duplicate"`)
	}

	// The verdict, as a table.
	var b strings.Builder
	fmt.Fprintf(&b, "\ncontainer chaos (deploy/compose.yaml on local images, %d tenants at %.0f facts/s for %s)\n", cfg.Tenants, cfg.Rate, cfg.Duration)
	fmt.Fprintf(&b, "%-8s %-10s %-10s %-12s %s\n", "fault", "killed at", "down for", "verdict", "proof")
	for _, f := range []fault{billing, kafka} {
		verdict := "proven"
		detail := strings.Join(f.proof, "; ")
		if f.problem != "" {
			verdict, detail = "NOT PROVEN", f.problem
		}
		fmt.Fprintf(&b, "%-8s %-10s %-10s %-12s %s\n", f.service, f.killedAt, f.down.Round(100*time.Millisecond), verdict, detail)
	}
	fmt.Fprintf(&b, "facts sent %d, accepted %d, counted in query %d, charged in query %d, lost %d, answered 5xx %v\n",
		rep.Totals.Sent, rep.Totals.Accepted, rep.Totals.Counted, rep.Totals.Charged, lost, rep.Totals.ServerErrors)
	fmt.Fprintf(&b, "real duplicate deliveries absorbed (inbox DUPLICATE decisions of billing, invoice, query since their last start; billing's count restarted with it): %.0f\n", duplicates)
	for _, r := range recons {
		fmt.Fprintf(&b, "reconciliation %s %s: %s, mismatches %d\n", r.tenant, r.period, r.counts, r.mismatches)
	}
	t.Log(b.String())
	for _, f := range []fault{billing, kafka} {
		if f.problem != "" {
			t.Errorf("not proven: %s killed under load: %s", f.service, f.problem)
		}
	}
	if lost != 0 || rep.Totals.Counted != rep.Totals.Accepted {
		t.Errorf("accepted %d, counted %d, charged %d: want all equal", rep.Totals.Accepted, rep.Totals.Counted, rep.Totals.Charged)
	}
	if rep.Totals.Accepted == 0 {
		t.Error("no fact accepted: the load never reached the system")
	}
}

// killAndRestart SIGKILLs a service's container, checks that it died (exit
// 137 or a new start), runs observe while it is down, holds it down for
// hold in all, starts it again and waits for its healthcheck.
func killAndRestart(ctx context.Context, t *testing.T, c Compose, service string, since func() time.Duration,
	hold time.Duration, observe func(context.Context, *fault)) fault {
	t.Helper()
	f := fault{service: service}
	id, err := c.ContainerID(ctx, service)
	if err != nil {
		f.problem = err.Error()
		return f
	}
	before, err := Inspect(ctx, id)
	if err != nil || !before.Running {
		f.problem = fmt.Sprintf("not running before the kill (%v, %s)", err, before.Status)
		return f
	}
	f.killedAt = since()
	t.Logf("[%s] docker kill %s (%.12s)", f.killedAt, service, id)
	killed := time.Now()
	if err := Kill(ctx, id); err != nil {
		f.problem = "docker kill: " + err.Error()
		return f
	}
	after, err := Inspect(ctx, id)
	switch {
	case err != nil:
		f.problem = err.Error()
		return f
	case !after.Running && after.ExitCode == 137:
		f.proof = append(f.proof, "exited 137 (SIGKILL)")
	case after.StartedAt.After(before.StartedAt):
		f.proof = append(f.proof, "restarted by its restart policy at once")
	default:
		f.problem = fmt.Sprintf("still %s after docker kill (exit code %d)", after.Status, after.ExitCode)
		return f
	}
	observe(ctx, &f)
	if rest := hold - time.Since(killed); rest > 0 {
		sleep(ctx, rest)
	}
	t.Logf("[%s] docker start %s", since(), service)
	if err := Start(ctx, id); err != nil {
		f.problem = "docker start: " + err.Error()
		return f
	}
	st, err := WaitHealthy(ctx, id, 3*time.Minute)
	f.down = time.Since(killed)
	if err != nil {
		f.problem = "not healthy again: " + err.Error()
		return f
	}
	if !st.StartedAt.After(before.StartedAt) {
		f.problem = "healthy, but never restarted: the kill did not take"
		return f
	}
	f.proof = append(f.proof, fmt.Sprintf("started again, healthy %s after the kill", f.down.Round(100*time.Millisecond)))
	t.Logf("[%s] %s healthy again (%s after the kill)", since(), service, f.down.Round(100*time.Millisecond))
	return f
}

func get(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// metricSum adds up every sample of the metric name in a service's
// /metrics that has the label pair label (name="value"; "" for any).
func metricSum(ctx context.Context, base, name, label string) float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		metric, rest, _ := strings.Cut(line, "{")
		if metric != name && !strings.HasPrefix(line, name+" ") || !strings.Contains(rest, label) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func short(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// logWriter sends the load tool's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w *logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
