package cli

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
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/pkg/httpx"
)

// maxBatch is the most events usage:batch takes at once.
const maxBatch = 1000

// record is one usage event read from the input, and where.
type record struct {
	line  int
	event usageapi.UsageRequest
}

// usageLine is a line of the input, NDJSON or CSV, before it is checked.
type usageLine struct {
	SourceSystem  string  `json:"sourceSystem"`
	SourceEventID string  `json:"sourceEventId"`
	MeterCode     string  `json:"meterCode"`
	Quantity      string  `json:"quantity"`
	OccurredAt    string  `json:"occurredAt"`
	Currency      *string `json:"currency"`
	// Properties are the fact's properties: an object of strings (NDJSON),
	// the properties.<name> columns (CSV).
	Properties map[string]any `json:"properties"`
}

// readUsage reads usage events from r: NDJSON (one object a line, with
// the fields of a usage request, properties an object of strings) or CSV
// with a header naming them (sourceSystem, sourceEventId, meterCode,
// quantity, occurredAt, currency, and a column properties.<name> per
// property, an empty cell no property; meterCode, quantity and occurredAt
// are required). An event without sourceSystem gets sourceSystem; one
// without sourceEventId gets one derived from its line and content
// (properties included), so sending the same file again replays instead
// of counting twice. No time is made up for an event without occurredAt (a
// second send would then differ from the first): such input, a quantity
// that is no decimal or a time that is no RFC 3339 time is refused, before
// any request.
func readUsage(r io.Reader, format, sourceSystem string) ([]record, error) {
	var recs []record
	add := func(n int, l usageLine) error {
		rec, err := checkUsage(n, l, sourceSystem)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		return nil
	}
	var err error
	switch format {
	case "ndjson":
		err = readNDJSON(r, add)
	case "csv":
		err = readCSV(r, add)
	default:
		err = fmt.Errorf("format %q: want csv or ndjson", format)
	}
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// checkUsage makes the usage event of line n (see readUsage).
func checkUsage(n int, l usageLine, sourceSystem string) (record, error) {
	e := usageapi.UsageRequest{SourceSystem: l.SourceSystem, SourceEventId: l.SourceEventID, MeterCode: l.MeterCode, Currency: l.Currency}
	if l.Currency != nil && *l.Currency == "" {
		e.Currency = nil
	}
	if l.OccurredAt == "" {
		return record{}, fmt.Errorf("line %d: no occurredAt (the time of the usage, RFC 3339)", n)
	}
	at, err := time.Parse(time.RFC3339Nano, l.OccurredAt)
	if err != nil {
		return record{}, fmt.Errorf("line %d: occurredAt %q is not an RFC 3339 time such as 2026-11-01T12:00:00Z", n, l.OccurredAt)
	}
	e.OccurredAt = at
	if e.Quantity, err = decimal.NewFromString(l.Quantity); err != nil {
		return record{}, fmt.Errorf("line %d: quantity %q is not a decimal number", n, l.Quantity)
	}
	if e.SourceSystem == "" {
		e.SourceSystem = sourceSystem
	}
	var props usageapi.Properties
	for name, v := range l.Properties {
		s, ok := v.(string)
		if !ok {
			return record{}, fmt.Errorf("line %d: property %q is not a string (properties are strings: quote numbers)", n, name)
		}
		if props == nil {
			props = usageapi.Properties{}
		}
		props[name] = s
	}
	if props != nil {
		e.Properties = &props
	}
	if e.SourceEventId == "" {
		e.SourceEventId = derivedID(n, l, props)
	}
	return record{line: n, event: e}, nil
}

// derivedID is the sourceEventId of line n without one: a hash of its line
// number and content. A line without properties hashes as it did before
// properties existed, so a file sent then replays now.
func derivedID(n int, l usageLine, props usageapi.Properties) string {
	in := fmt.Appendf(nil, "%d\x00%s\x00%s\x00%s", n, l.MeterCode, l.Quantity, l.OccurredAt)
	if len(props) > 0 {
		raw, _ := json.Marshal(props) // keys sorted: the same properties, the same text
		in = append(append(in, 0), raw...)
	}
	h := sha256.Sum256(in)
	return "billingctl-" + hex.EncodeToString(h[:12])
}

// readNDJSON gives add each non-blank line of r, an object of a usage
// request's fields, with its line number.
func readNDJSON(r io.Reader, add func(n int, l usageLine) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		d := json.NewDecoder(bytes.NewReader(line))
		d.DisallowUnknownFields()
		var l usageLine
		if err := d.Decode(&l); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if err := add(n, l); err != nil {
			return err
		}
	}
	return sc.Err()
}

// readCSV gives add each row of r after its header, which names the columns
// (meterCode, quantity and occurredAt required), with its line number.
func readCSV(r io.Reader, add func(n int, l usageLine) error) error {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err != nil {
		return fmt.Errorf("the CSV header: %w", err)
	}
	at := map[string]int{}
	props := map[string]int{} // property name -> column
	for i, h := range header {
		h = strings.TrimSpace(h)
		at[h] = i
		if name, ok := strings.CutPrefix(h, "properties."); ok {
			if name == "" {
				return fmt.Errorf("the CSV header has a column properties. without a property name")
			}
			props[name] = i
		}
	}
	for _, f := range []string{"meterCode", "quantity", "occurredAt"} {
		if _, ok := at[f]; !ok {
			return fmt.Errorf("the CSV header %q has no %s column (want sourceSystem, sourceEventId, meterCode, quantity, occurredAt, currency, properties.<name>)", strings.Join(header, ","), f)
		}
	}
	for n := 2; ; n++ {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		get := func(f string) string {
			if i, ok := at[f]; ok && i < len(row) {
				return strings.TrimSpace(row[i])
			}
			return ""
		}
		cur := get("currency")
		l := usageLine{SourceSystem: get("sourceSystem"), SourceEventID: get("sourceEventId"),
			MeterCode: get("meterCode"), Quantity: get("quantity"), OccurredAt: get("occurredAt"), Currency: &cur}
		for name, i := range props {
			if i < len(row) && strings.TrimSpace(row[i]) != "" {
				if l.Properties == nil {
					l.Properties = map[string]any{}
				}
				l.Properties[name] = strings.TrimSpace(row[i])
			}
		}
		if err := add(n, l); err != nil {
			return err
		}
	}
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
	format := fs.String("format", "", "csv (a header line; a properties.<name> column per property) or ndjson (properties an object of strings); default: from the file's extension, ndjson for stdin")
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
			fmt.Fprintf(c.out, "%d events in %d batches (%d retries) in %.1fs: %d accepted, %d replayed, %d refused\n",
				s.Events, s.Batches, s.Retries, s.Seconds, s.Accepted, s.Replayed, s.Refused)
			printRefusals(c.out, s.RefusedEvents)
		}
		if s.Refused > 0 {
			return &SomeRefusedError{Refused: s.Refused, Total: s.Events}
		}
		return nil
	}
}

// Refusals shown by printRefusals: the codes with most events first, and
// the first lines of each.
const (
	shownCodes = 5
	shownLines = 3
)

// printRefusals prints the refused events grouped by code, with how many,
// the first lines and the detail of the first: a file refused whole (facts
// before the price, a meter usage does not know yet) reads in a few lines,
// not one per event. -o json lists every refused event.
func printRefusals(w io.Writer, refused []RefusedEvent) {
	if len(refused) == 0 {
		return
	}
	type group struct {
		code  string
		lines []int
		first RefusedEvent
	}
	var groups []*group
	byCode := map[string]*group{}
	for _, r := range refused {
		g := byCode[r.Code]
		if g == nil {
			g = &group{code: r.Code, first: r}
			byCode[r.Code] = g
			groups = append(groups, g)
		}
		g.lines = append(g.lines, r.Line)
	}
	sort.SliceStable(groups, func(i, j int) bool { return len(groups[i].lines) > len(groups[j].lines) })
	fmt.Fprintln(w, "refused, by code (-o json lists every refused event):")
	for i, g := range groups {
		if i == shownCodes {
			fmt.Fprintf(w, "  ... and %d more codes\n", len(groups)-shownCodes)
			break
		}
		lines := make([]string, 0, shownLines+1)
		for _, n := range g.lines[:min(len(g.lines), shownLines)] {
			lines = append(lines, fmt.Sprint(n))
		}
		if len(g.lines) > shownLines {
			lines = append(lines, "...")
		}
		word := "line"
		if len(g.lines) > 1 {
			word = "lines"
		}
		detail := ""
		if g.first.Detail != "" {
			detail = ": " + g.first.Detail
		}
		fmt.Fprintf(w, "  %s: %d (%d %s; %s %s)%s\n", g.code, len(g.lines), g.first.Status, http.StatusText(g.first.Status),
			word, strings.Join(lines, ", "), detail)
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
		req := usageapi.BatchRequest{Events: make([]usageapi.UsageRequest, hi-lo)}
		for i := lo; i < hi; i++ {
			req.Events[i-lo] = recs[i].event
		}
		var resp usageapi.BatchResponse
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
				code, detail := deref(r.Code), deref(r.Detail)
				s.ByCode[code]++
				s.RefusedEvents = append(s.RefusedEvents, RefusedEvent{Line: recs[lo+i].line, SourceEventID: recs[lo+i].event.SourceEventId,
					Status: r.Status, Code: code, Detail: detail})
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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
