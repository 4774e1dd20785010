package chaos

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Row is one scenario's line in the report.
type Row struct {
	Scenario string
	// Facts: distinct usage facts accepted; Requests: usage requests sent
	// (batches and single facts, retries included); DupSubmitted: facts
	// sent again on purpose (across requests and within one batch).
	Facts, Requests, DupSubmitted int
	// Faults injected.
	Faults int
	// DupPublished: messages the topics hold twice (a relay sent an event
	// again); DupAbsorbed: DUPLICATE decisions of the inboxes (real
	// duplicate deliveries, from relays and from consumers redelivered
	// after a crash or rebalance); Deferred: DEFERRED decisions (each
	// applied later: none is left at rest); Quarantined decisions.
	DupPublished, DupAbsorbed, Deferred, Quarantined int
	// From the reconciliation.
	Lost, Duplicated, Mismatched int
	Reconciled                   bool
	// Recovery: the longest time, over the scenario's faults, from a
	// fault's end until everything accepted before it was charged,
	// invoiced and projected.
	Recovery     time.Duration
	RecoveryNote string
	Took         time.Duration
	Verdict      string
	Notes        []string
	Problems     []string
	NotProven    []string
}

// WriteReport writes the table of rows, then each scenario's notes and
// problems.
func WriteReport(w io.Writer, rows []*Row, total time.Duration) {
	head := []string{"scenario", "facts sent (accepted)", "dup sent", "faults", "dup published", "dup delivered+absorbed",
		"deferred->applied", "quarantined", "lost", "dup effects", "mismatched", "time to recover", "took", "result"}
	var cells [][]string
	facts := 0
	for _, r := range rows {
		facts += r.Facts
		rec := "-"
		if r.Faults > 0 {
			rec = r.Recovery.Round(100 * time.Millisecond).String()
			if r.RecoveryNote != "" {
				rec += " (!)"
			}
		}
		num := func(n int) string {
			if !r.Reconciled {
				return "?"
			}
			return fmt.Sprint(n)
		}
		cells = append(cells, []string{r.Scenario, fmt.Sprint(r.Facts), fmt.Sprint(r.DupSubmitted), fmt.Sprint(r.Faults),
			fmt.Sprint(r.DupPublished), fmt.Sprint(r.DupAbsorbed), fmt.Sprint(r.Deferred), fmt.Sprint(r.Quarantined),
			num(r.Lost), num(r.Duplicated), num(r.Mismatched), rec, r.Took.Round(time.Second).String(), r.Verdict})
	}
	width := make([]int, len(head))
	for i, h := range head {
		width[i] = len(h)
	}
	for _, c := range cells {
		for i, v := range c {
			width[i] = max(width[i], len(v))
		}
	}
	line := func(vals []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, v := range vals {
			fmt.Fprintf(&b, " %-*s |", width[i], v)
		}
		fmt.Fprintln(w, b.String())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CHAOS SUITE REPORT")
	line(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, c := range cells {
		line(c)
	}
	fmt.Fprintf(w, "\n%d usage facts accepted across the suite; suite took %s.\n", facts, total.Round(time.Second))
	for _, r := range rows {
		if len(r.Notes)+len(r.Problems)+len(r.NotProven) == 0 && r.RecoveryNote == "" {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", r.Scenario)
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
		if r.RecoveryNote != "" {
			fmt.Fprintf(w, "  - recovery: %s\n", r.RecoveryNote)
		}
		for _, n := range r.NotProven {
			fmt.Fprintf(w, "  - NOT PROVEN: %s\n", n)
		}
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  - FAILED: %s\n", p)
		}
	}
}
