package billingctl

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/httpx"
)

// maxBatch is the most events usage:batch takes at once.
const maxBatch = 1000

// record is one usage event read from the input, and where.
type record struct {
	line  int
	event UsageEvent
}

// readUsage reads usage events from r: NDJSON (one UsageEvent object a
// line) or CSV with a header naming the fields (sourceSystem,
// sourceEventId, meterCode, quantity, occurredAt, currency; meterCode,
// quantity and occurredAt are required). An event without sourceSystem gets
// sourceSystem; one without sourceEventId gets one derived from its line
// and content, so sending the same file again replays instead of counting
// twice. No time is made up for an event without occurredAt (a second send
// would then differ from the first): the input is refused, before any
// request.
func readUsage(r io.Reader, format, sourceSystem string) ([]record, error) {
	var recs []record
	switch format {
	case "ndjson":
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			d := json.NewDecoder(bytes.NewReader(line))
			d.DisallowUnknownFields()
			var e UsageEvent
			if err := d.Decode(&e); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			recs = append(recs, record{line: n, event: e})
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	case "csv":
		cr := csv.NewReader(r)
		cr.TrimLeadingSpace = true
		header, err := cr.Read()
		if err != nil {
			return nil, fmt.Errorf("the CSV header: %w", err)
		}
		at := map[string]int{}
		for i, h := range header {
			at[strings.TrimSpace(h)] = i
		}
		for _, f := range []string{"meterCode", "quantity", "occurredAt"} {
			if _, ok := at[f]; !ok {
				return nil, fmt.Errorf("the CSV header %q has no %s column (want sourceSystem, sourceEventId, meterCode, quantity, occurredAt, currency)", strings.Join(header, ","), f)
			}
		}
		for n := 2; ; n++ {
			row, err := cr.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			get := func(f string) string {
				if i, ok := at[f]; ok && i < len(row) {
					return strings.TrimSpace(row[i])
				}
				return ""
			}
			recs = append(recs, record{line: n, event: UsageEvent{SourceSystem: get("sourceSystem"), SourceEventID: get("sourceEventId"),
				MeterCode: get("meterCode"), Quantity: get("quantity"), OccurredAt: get("occurredAt"), Currency: get("currency")}})
		}
	default:
		return nil, fmt.Errorf("format %q: want csv or ndjson", format)
	}
	for i := range recs {
		e := &recs[i].event
		if e.SourceSystem == "" {
			e.SourceSystem = sourceSystem
		}
		if e.OccurredAt == "" {
			return nil, fmt.Errorf("line %d: no occurredAt (the time of the usage, RFC 3339)", recs[i].line)
		}
		if e.SourceEventID == "" {
			h := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%s\x00%s", recs[i].line, e.MeterCode, e.Quantity, e.OccurredAt))
			e.SourceEventID = "billingctl-" + hex.EncodeToString(h[:12])
		}
	}
	return recs, nil
}

// SendSummary is what `usage send` did.
type SendSummary struct {
	Events   int            `json:"events"`
	Accepted int            `json:"accepted"`
	Replayed int            `json:"replayed"`
	Refused  int            `json:"refused"`
	Batches  int            `json:"batches"`
	Retries  int            `json:"retries"`
	ByCode   map[string]int `json:"refusedByCode,omitempty"`
	Seconds  float64        `json:"seconds"`
	// RefusedEvents are the refused events: their line, source event id,
	// code and detail.
	RefusedEvents []RefusedEvent `json:"refusedEvents,omitempty"`
}

// RefusedEvent is one refused event of `usage send`.
type RefusedEvent struct {
	Line          int    `json:"line"`
	SourceEventID string `json:"sourceEventId"`
	Status        int    `json:"status"`
	Code          string `json:"code"`
	Detail        string `json:"detail,omitempty"`
}

func usageSend(fs *flag.FlagSet) runFunc {
	file := fs.String("file", "", "the file to read (- or none: standard input)")
	format := fs.String("format", "", "csv or ndjson (default: from the file's extension; ndjson for stdin)")
	batch := fs.Int("batch", 500, "events per request, 1 to 1000")
	source := fs.String("source-system", "billingctl", "the sourceSystem of events that name none")
	retries := fs.Int("retries", 5, "retries of a batch the service could not take (unreachable, 5xx, 429), with backoff; replays are safe")
	quiet := fs.Bool("q", false, "no progress bar")
	return func(ctx context.Context, c *Client, args []string) error {
		if len(args) > 1 || (len(args) == 1 && *file != "") {
			return usagef("give one file, as an argument or -file")
		}
		if len(args) == 1 {
			*file = args[0]
		}
		if *batch < 1 || *batch > maxBatch {
			return usagef("-batch must be from 1 to %d", maxBatch)
		}
		in := c.in
		name := "stdin"
		if *file != "" && *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return usageError{err.Error()}
			}
			defer f.Close()
			in, name = f, *file
			if *format == "" {
				switch strings.ToLower(filepath.Ext(*file)) {
				case ".csv":
					*format = "csv"
				case ".ndjson", ".jsonl", ".json":
					*format = "ndjson"
				}
			}
		}
		if *format == "" {
			*format = "ndjson"
		}
		if in == nil {
			return usagef("no input: give a file")
		}
		recs, err := readUsage(in, *format, *source)
		if err != nil {
			return usageError{name + ": " + err.Error()}
		}
		s, err := c.sendUsage(ctx, recs, *batch, *retries, !*quiet && c.terminal)
		if err != nil {
			return err
		}
		if c.json {
			if err := c.printJSON(s); err != nil {
				return err
			}
		} else {
			if len(s.RefusedEvents) > 0 {
				rows := make([]map[string]any, len(s.RefusedEvents))
				for i, r := range s.RefusedEvents {
					rows[i] = map[string]any{"line": json.Number(fmt.Sprint(r.Line)), "id": r.SourceEventID,
						"status": json.Number(fmt.Sprint(r.Status)), "code": r.Code, "detail": r.Detail}
				}
				fmt.Fprintln(c.out, "refused:")
				c.table(rows, col("LINE", "line"), col("SOURCE EVENT", "id"), col("STATUS", "status"), col("CODE", "code"), col("DETAIL", "detail"))
				fmt.Fprintln(c.out)
			}
			fmt.Fprintf(c.out, "%d events in %d batches (%d retries) in %.1fs: %d accepted, %d replayed, %d refused\n",
				s.Events, s.Batches, s.Retries, s.Seconds, s.Accepted, s.Replayed, s.Refused)
		}
		if s.Refused > 0 {
			return &SomeRefusedError{Refused: s.Refused, Total: s.Events}
		}
		return nil
	}
}

// sendUsage posts recs in batches to usage:batch, retrying a batch the
// service could not take: the same events again are replays, never counted
// twice.
func (c *Client) sendUsage(ctx context.Context, recs []record, batch, retries int, progress bool) (SendSummary, error) {
	start := time.Now()
	s := SendSummary{Events: len(recs), ByCode: map[string]int{}}
	for lo := 0; lo < len(recs); lo += batch {
		hi := min(lo+batch, len(recs))
		req := UsageBatchRequest{Events: make([]UsageEvent, hi-lo)}
		for i := lo; i < hi; i++ {
			req.Events[i-lo] = recs[i].event
		}
		var resp UsageBatchResponse
		for attempt := 0; ; attempt++ {
			_, err := c.decode(ctx, call{service: "usage", method: http.MethodPost, path: c.tenantPath("usage:batch"), body: req}, &resp)
			if err == nil {
				break
			}
			if attempt >= retries || !retryable(err) {
				return s, fmt.Errorf("batch of lines %d-%d (%d of %d events sent before it): %w", recs[lo].line, recs[hi-1].line, lo, len(recs), err)
			}
			s.Retries++
			wait := time.Duration(200<<min(attempt, 5)) * time.Millisecond
			fmt.Fprintf(c.err, "billingctl: batch of lines %d-%d: %v; retrying in %v\n", recs[lo].line, recs[hi-1].line, err, wait)
			select {
			case <-ctx.Done():
				return s, ctx.Err()
			case <-time.After(wait):
			}
		}
		if len(resp.Results) != hi-lo {
			return s, fmt.Errorf("usage:batch answered %d results for %d events", len(resp.Results), hi-lo)
		}
		s.Batches++
		for i, r := range resp.Results {
			switch r.Status {
			case http.StatusCreated:
				s.Accepted++
			case http.StatusOK:
				s.Replayed++
			default:
				s.Refused++
				s.ByCode[r.Code]++
				s.RefusedEvents = append(s.RefusedEvents, RefusedEvent{Line: recs[lo+i].line, SourceEventID: recs[lo+i].event.SourceEventID,
					Status: r.Status, Code: r.Code, Detail: r.Detail})
			}
		}
		if progress {
			drawProgress(c.err, hi, len(recs), s)
		}
	}
	if progress {
		fmt.Fprintln(c.err)
	}
	s.Seconds = time.Since(start).Seconds()
	return s, nil
}

// retryable reports whether a batch may succeed when sent again: the
// service unreachable, overloaded or failing, not a refusal of the request.
func retryable(err error) bool {
	var p *httpx.Problem
	if errors.As(err, &p) {
		return p.Status >= 500 || p.Status == http.StatusTooManyRequests
	}
	return true // transport errors and answers off contract (a proxy's 502 page)
}

// drawProgress redraws a progress bar on a terminal.
func drawProgress(w io.Writer, done, total int, s SendSummary) {
	const width = 30
	n := width
	if total > 0 {
		n = done * width / total
	}
	fmt.Fprintf(w, "\r[%s%s] %d/%d  accepted %d  replayed %d  refused %d", strings.Repeat("=", n), strings.Repeat(" ", width-n),
		done, total, s.Accepted, s.Replayed, s.Refused)
}
