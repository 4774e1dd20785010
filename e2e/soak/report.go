package soak

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
)

// Conditions are what the report states the run ran under.
type Conditions struct {
	Commit, Kafka, Machine, Started string
}

// Panels are the plot's charts, one per watched series kind.
func (res *Result) Panels() []Panel {
	s := res.Series
	perService := func(kind string) []Line {
		var out []Line
		for _, name := range slices.Sorted(maps.Keys(s)) {
			if k, what, _ := cutKind(name); k == kind {
				out = append(out, Line{Name: what, Points: s[name]})
			}
		}
		return out
	}
	top := func(kind string, n int, by func([]Point) float64) []Line {
		lines := perService(kind)
		slices.SortFunc(lines, func(a, b Line) int { return cmp.Compare(by(b.Points), by(a.Points)) })
		return lines[:min(n, len(lines))]
	}
	last := func(p []Point) float64 {
		if len(p) == 0 {
			return 0
		}
		return p[len(p)-1].V
	}
	peak := func(p []Point) float64 {
		m := 0.0
		for _, x := range p {
			m = max(m, x.V)
		}
		return m
	}
	var p50, p95, p99 []Point
	for _, m := range res.Latency {
		t := float64(m.Minute)*60 + 30
		p50, p95, p99 = append(p50, Point{t, m.P50}), append(p95, Point{t, m.P95}), append(p99, Point{t, m.P99})
	}
	return []Panel{
		{Title: "usage facts accepted and charged in billing", Unit: "facts/s", Lines: []Line{
			{"accepted", rate(s["accepted"])}, {"charged", rate(s["charged"])}}},
		{Title: "usage -> charged in billing, per minute of occurrence", Unit: "s", Lines: []Line{{"p50", p50}, {"p95", p95}, {"p99", p99}}},
		{Title: "resident memory", Unit: "MiB", Scale: 1 << 20, Lines: perService("rss")},
		{Title: "Go heap in use (go_memstats_heap_inuse_bytes)", Unit: "MiB", Scale: 1 << 20, Lines: perService("heap")},
		{Title: "goroutines", Unit: "count", Lines: perService("goroutines")},
		{Title: "open files", Unit: "count", Lines: perService("fds")},
		{Title: "database connections (pg_stat_activity)", Unit: "count", Lines: perService("conns")},
		{Title: "largest tables with their indexes", Unit: "MiB", Scale: 1 << 20, Lines: top("size", 8, last)},
		{Title: "dead tuples, most at any time", Unit: "rows", Lines: top("dead", 8, peak)},
		{Title: "outbox backlog (pending, counted up to 100,000, + dead letters)", Unit: "events", Lines: perService("outbox")},
		{Title: "inbox backlog (deferred + quarantined)", Unit: "events", Lines: perService("inbox")},
		{Title: "consumer lag, per group", Unit: "messages", Lines: perService("lag")},
		{Title: "retention purges: rows deleted (n_tup_del) from outbox, inbox and idempotency tables", Unit: "rows", Lines: top("purged", 8, last)},
		{Title: "the test process (ledger, watch, reconciliation)", Unit: "MiB", Scale: 1 << 20, Lines: perService("harness")},
	}
}

// rate turns a cumulative count into a per-second rate between readings.
func rate(pts []Point) []Point {
	var out []Point
	for i := 1; i < len(pts); i++ {
		if dt := pts[i].T - pts[i-1].T; dt > 0 && pts[i].V >= pts[i-1].V {
			out = append(out, Point{pts[i].T, (pts[i].V - pts[i-1].V) / dt})
		}
	}
	return out
}

// Bands are the faults, for shading.
func (res *Result) Bands() []Band {
	var out []Band
	for _, f := range res.Faults {
		out = append(out, Band{f.Start.Sub(res.LoadStart).Seconds(), f.End.Sub(res.LoadStart).Seconds()})
	}
	return out
}

// Title is the plot's and the report's first line.
func (res *Result) Title() string {
	verdict := "passed"
	if !res.OK() {
		verdict = "FAILED"
	}
	return fmt.Sprintf("make soak: %s at %d facts/s, %d faults, seed %d: %s", res.Config.Duration, res.Config.Rate,
		len(res.Faults), res.Config.Seed, verdict)
}

// reconRow is the reconciliation table's row. A run that ended before it
// could reconcile (facts still uncharged when the wait ran out) knows
// nothing of what was lost, charged twice or mismatched: those cells are
// "?", as in the chaos suite's table, never a 0 that reads as a pass.
func reconRow(row *chaos.Row) string {
	num := func(n int) string {
		if !row.Reconciled {
			return "?"
		}
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("| %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |", row.Facts, row.Requests, row.DupSubmitted,
		row.DupAbsorbed, row.DupPublished, row.Deferred, row.Quarantined, num(row.Lost), num(row.Duplicated), num(row.Mismatched))
}

// WriteMarkdown writes the report.
func (res *Result) WriteMarkdown(w io.Writer, c Conditions, plot string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# %s\n\n", res.Title())
	p("Replay: `make soak SOAK_DURATION=%s SOAK_RATE=%d SOAK_SEED=%d`. ", res.Config.Duration, res.Config.Rate, res.Config.Seed)
	p("Started %s at commit %s; %s; %s. The stack of the chaos suite (e2e/stack: the five services as processes, one each, PostgreSQL with fsync off, toxiproxy in front of Kafka and each database). ",
		c.Started, c.Commit, c.Kafka, c.Machine)
	p("Load: the chaos suite's load (e2e/chaos) at %d facts/s, %.0f%% to %s and the rest evenly to %s, batches and single facts, 1%% deliberate duplicates; a new price version of every tenant's meters every 3 minutes. Watched every %s. The whole run took %s.\n\n",
		res.Config.Rate, DominantShare*100, Dominant, strings.Join(chaos.Tenants(Key), ", "), res.Config.Sample, res.Took.Round(time.Second))
	if plot != "" {
		p("![plot](%s)\n\n", plot)
	}
	p("## Verdict\n\n")
	if res.OK() {
		p("Passed: nothing lost, nothing charged twice, every invoice equal to what was sent, reconciliation empty, every resource series flat over the last half.\n\n")
	} else {
		for _, pr := range res.Problems {
			p("- %s\n", oneLine(pr))
		}
		p("\n")
	}
	if row := res.Row; row != nil {
		p("## Reconciliation (the chaos suite's, from the five databases)\n\n")
		p("| facts accepted | requests | sent again on purpose | duplicates delivered and absorbed | duplicate publications | deferred then applied | quarantined | lost | charged twice / extra | mismatched |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		p("%s\n\n", reconRow(row))
		if rc := res.Recon; rc != nil {
			p("Reconciled %d usage facts, %d charges, %d adjustments, %d invoice charges in %d lines on %d invoices, %d projected events, %d price versions.\n\n",
				rc.Facts, rc.Charges, rc.Adjustments, rc.InvoiceCharges, rc.InvoiceLines, rc.Invoices, rc.Projected, rc.Prices)
		}
		for _, n := range row.Notes {
			if !strings.HasPrefix(n, "reconciled ") { // said above
				p("- %s\n", oneLine(n))
			}
		}
		p("\n")
	}
	p("## Faults\n\n| at | kind | target | lasted | previous still recovering | charged again after |\n|---|---|---|---:|---|---:|\n")
	for _, f := range res.Faults {
		rec := f.Recovery.Round(100 * time.Millisecond).String()
		if f.RecoverErr != nil {
			rec = "NOT: " + oneLine(f.RecoverErr.Error())
		}
		if f.Err != nil {
			rec += " (fault failed: " + oneLine(f.Err.Error()) + ")"
		}
		p("| %s | %s | %s | %s | %v | %s |\n", f.Start.Sub(res.LoadStart).Round(time.Second), f.Kind, f.Target,
			f.End.Sub(f.Start).Round(100*time.Millisecond), yes(f.Overlapping), rec)
	}
	p("\nWebhook endpoints changed under the load: %d created, %d deleted (one tenant's every four minutes, deleted two minutes later, and %s's kept to the end); %d attempts failed and were retried%s; %d deliveries arrived at the receiver (invoices issued while an endpoint existed).\n",
		res.Churn.Created, res.Churn.Deleted, orNone(res.Churn.Kept), res.Churn.Failures, lastFailure(res.Churn.Last), res.Churn.Delivered)
	p("\nPlans changing under the load: %d plan versions published (%s, charging only %s, which no fact uses), %s's subscription changed %d times (every three minutes, to the other plan); %d attempts failed and were retried%s.\n",
		res.Plans.Published, strings.Join(Plans, ", "), PlanMeter, orNone(res.Plans.Tenant), res.Plans.Subscribed, res.Plans.Failures, lastFailure(res.Plans.Last))
	p("\n\"Charged again after\": from the fault's end until every fact accepted from 10 s before it began to its end had its charge in billing.\n\n")
	p("## Periods closed by the scheduler under the moved clock\n\n")
	if res.Config.Clock == nil {
		p("None: SOAK_CLOSE_EVERY=0, the periods were closed at the end only.\n\n")
	} else {
		p("Every %s (once at half time in a shorter run) the load paused, every accepted fact was charged, the services' clock moved past the period's end plus %s of grace, billing's scheduler closed it and invoice issued it; each invoice was compared with what the ledger sent for the period, then the load resumed on the moved clock. Faults went on meanwhile.\n\n", res.Config.CloseEvery, Grace)
		p("| at | period | paused after | all charged after | closed and issued after | clock offset after | invoices equal to the ledger | facts | result |\n|---:|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, c := range res.Closes {
			result := "ok"
			if c.Err != nil {
				result = "FAILED: " + oneLine(c.Err.Error())
			}
			p("| %s | %s | %s | %s | %s | %s | %d | %d | %s |\n", c.At.Round(time.Second), c.Period, c.Paused.Round(100*time.Millisecond),
				c.Charged.Round(100*time.Millisecond), c.Closed.Round(100*time.Millisecond), c.Offset.Round(time.Second), c.Invoices, c.Facts, result)
		}
		p("\n")
	}
	p("## Usage -> charged in billing, per minute\n\n| minute | facts | p50 | p95 | p99 |\n|---:|---:|---:|---:|---:|\n")
	for _, m := range res.Latency {
		p("| %d | %d | %.2f s | %.2f s | %.2f s |\n", m.Minute, m.Facts, m.P50, m.P95, m.P99)
	}
	p("\nFrom the time the load first sent a fact (its occurredAt) to the commit time of its charge in billing (charge.created_at); a fact retried through an outage counts its retries.\n\n")
	p("## Slope test (last half against the level after warm-up)\n\n")
	if res.SettledAt >= 0 {
		p("Every consumer group of every service first held all its partitions %.0f s into the load; each level is the median of the readings from the first one at or after the warm-up (%.0f s) taken while every group held its partitions and the series' service was not down or restarting after a kill, over %.0f s.\n\n",
			res.SettledAt, window(res.Config.Duration.Seconds()).Warm, window(res.Config.Duration.Seconds()).Baseline-window(res.Config.Duration.Seconds()).Warm)
	} else {
		p("**The consumer groups were never seen holding all their partitions**: no series has a level, the resource verdicts are not evidence.\n\n")
	}
	p("| series | level after warm-up | level from | end of the fit | change | slope per minute | verdict |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, f := range res.Flat {
		v := "flat"
		switch {
		case f.NotEnough:
			v = "not enough readings"
		case f.Grew && !Judged(strings.SplitN(f.Name, "/", 2)[0]):
			v = "grew (not judged)"
		case f.Grew:
			v = "**GREW**"
		}
		p("| %s | %s | %.0f s | %s | %+.1f%% | %s | %s |\n", f.Name, f.fmt(f.Level), f.From, f.fmt(f.EndFit), pct(f.EndFit, f.Level), f.fmt(f.PerMinute), v)
	}
	p("\n## Tables (size with indexes, dead tuples)\n\n| table | at the start | at the end | dead tuples at the end | most dead tuples |\n|---|---:|---:|---:|---:|\n")
	var sizes []string
	for name := range res.Series {
		if k, _, _ := cutKind(name); k == "size" {
			sizes = append(sizes, name)
		}
	}
	endOf := func(name string) float64 {
		pts := res.Series[name]
		if len(pts) == 0 {
			return 0
		}
		return pts[len(pts)-1].V
	}
	slices.SortFunc(sizes, func(a, b string) int { return cmp.Compare(endOf(b), endOf(a)) })
	for _, name := range sizes[:min(12, len(sizes))] {
		_, table, _ := cutKind(name)
		pts := res.Series[name]
		dead := res.Series["dead/"+table]
		most := 0.0
		for _, d := range dead {
			most = max(most, d.V)
		}
		p("| %s | %.1f MiB | %.1f MiB | %.0f | %.0f |\n", table, pts[0].V/(1<<20), endOf(name)/(1<<20), endOf("dead/"+table), most)
	}
	p("\n## Retention purges (rows deleted, pg_stat_user_tables.n_tup_del)\n\n| table | deleted by the end of the load | deleted by the end |\n|---|---:|---:|\n")
	var purges []string
	for name := range res.Series {
		if k, _, _ := cutKind(name); k == "purged" {
			purges = append(purges, name)
		}
	}
	slices.Sort(purges)
	for _, name := range purges {
		_, table, _ := cutKind(name)
		p("| %s | %.0f | %.0f |\n", table, at(res.Series[name], res.Config.Duration.Seconds()), endOf(name))
	}
	p("\n## The test process\n\n")
	peak := func(name string) float64 {
		m := 0.0
		for _, x := range res.Series[name] {
			m = max(m, x.V)
		}
		return m
	}
	p("Resident memory %.0f MiB at the end of the load, %.0f MiB at most while watched (heap in use: %.0f MiB at the end of the load, %.0f MiB at most); after the watch, the reconciliation peaked at %.0f MiB resident (VmHWM).\n\n",
		at(res.Series["harness/resident"], res.Config.Duration.Seconds())/(1<<20), peak("harness/resident")/(1<<20),
		at(res.Series["harness/heap in use"], res.Config.Duration.Seconds())/(1<<20), peak("harness/heap in use")/(1<<20), res.PeakRSS/(1<<20))
}

// at is the last reading at or before t.
func at(pts []Point, t float64) float64 {
	v := 0.0
	for _, x := range pts {
		if x.T > t {
			break
		}
		v = x.V
	}
	return v
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}

func lastFailure(s string) string {
	if s == "" {
		return ""
	}
	return " (the last: " + oneLine(s) + ")"
}

func orNone(s string) string {
	if s == "" {
		return "no tenant"
	}
	return s
}
