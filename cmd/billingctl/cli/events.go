package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/pkg/auth"
)

// `events send`: CloudEvents from a file to usage's POST /v1/events.
func init() {
	register(&command{name: "events send", args: "[FILE|-]", short: "send CloudEvents from a file (an object, an array or NDJSON) to usage in batches; -platform: any tenant's",
		role: auth.RoleIngest, roleFor: platformRole, flags: eventsSend})
}

// platformRole is the role of `events send`: platform-ingest with
// -platform (a gateway: any subject, no tenant), else ingest (the tenant's
// own events).
func platformRole(fs *flag.FlagSet, _ string) string {
	if boolFlag(fs, "platform") {
		return auth.RolePlatformIngest
	}
	return auth.RoleIngest
}

// Bounds of one request to POST /v1/events, usage's (its httpapi MaxBatch
// and maxBatchBody): at most 1000 events and 2 MiB of body.
const (
	maxEventsBatch = 1000
	maxEventsBody  = 2 << 20
)

// mediaCloudEventsBatch is the media type of a batch of structured
// CloudEvents.
const mediaCloudEventsBatch = "application/cloudevents-batch+json"

// cloudEvent is one event of the file: its number (1 for the first), its
// line (NDJSON and concatenated objects), its id when it has one, and its
// JSON as sent.
type cloudEvent struct {
	number, line int
	id           string
	raw          json.RawMessage
}

// readCloudEvents reads a file of CloudEvents: one JSON object, a JSON
// array of them, or objects one after the other (NDJSON). An event without
// subject gets tenant as its subject when tenant is not empty. The input
// must be JSON objects; what they hold is usage's to judge.
func readCloudEvents(r io.Reader, tenant string) ([]cloudEvent, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(data)
	var evs []cloudEvent
	switch {
	case len(trimmed) == 0:
		return nil, errors.New("no events")
	case trimmed[0] == '[':
		var raws []json.RawMessage
		if err := json.Unmarshal(trimmed, &raws); err != nil {
			return nil, fmt.Errorf("a JSON array of CloudEvents: %w", err)
		}
		for i, raw := range raws {
			evs = append(evs, cloudEvent{number: i + 1, raw: raw})
		}
	default:
		d := json.NewDecoder(bytes.NewReader(data))
		for n := 1; ; n++ {
			start := d.InputOffset()
			var raw json.RawMessage
			if err := d.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("event %d (line %d): %w", n, lineAt(data, int(start)), err)
			}
			evs = append(evs, cloudEvent{number: n, line: lineAt(data, int(start)), raw: raw})
		}
	}
	for i := range evs {
		if err := evs[i].check(tenant); err != nil {
			return nil, fmt.Errorf("%s: %w", evs[i].where(), err)
		}
	}
	if len(evs) == 0 {
		return nil, errors.New("no events")
	}
	return evs, nil
}

// lineAt is the line of the first non-blank byte at or after offset.
func lineAt(data []byte, offset int) int {
	for offset < len(data) && (data[offset] == ' ' || data[offset] == '\t' || data[offset] == '\r' || data[offset] == '\n') {
		offset++
	}
	return 1 + bytes.Count(data[:offset], []byte("\n"))
}

// where names the event for a message: its number, and its line when the
// file has lines of events.
func (e cloudEvent) where() string {
	if e.line > 0 {
		return fmt.Sprintf("event %d (line %d)", e.number, e.line)
	}
	return fmt.Sprintf("event %d", e.number)
}

// check requires a JSON object, reads its id and gives it the tenant as
// subject when it names none.
func (e *cloudEvent) check(tenant string) error {
	var members map[string]json.RawMessage
	if bytes.TrimSpace(e.raw)[0] != '{' || json.Unmarshal(e.raw, &members) != nil {
		return errors.New("not a JSON object (a CloudEvent)")
	}
	_ = json.Unmarshal(members["id"], &e.id)
	if _, ok := members["subject"]; !ok && tenant != "" {
		members["subject"], _ = json.Marshal(tenant)
		raw, err := json.Marshal(members)
		if err != nil {
			return err
		}
		e.raw = raw
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, e.raw); err != nil {
		return err
	}
	e.raw = compact.Bytes()
	if len(e.raw)+2 > maxEventsBody {
		return fmt.Errorf("%d bytes: larger than a request to usage may be (%d)", len(e.raw), maxEventsBody)
	}
	return nil
}

// EventsSummary is what `events send` did.
type EventsSummary struct {
	Events int `json:"events"`
	// Sent are the events of the requests usage took: new or replays.
	Sent int `json:"sent"`
	// Refused are the events usage named as refused; Unwritten the others
	// of their requests, not written with them (a request is all or
	// nothing).
	Refused   int     `json:"refused"`
	Unwritten int     `json:"unwritten"`
	Requests  int     `json:"requests"`
	Retries   int     `json:"retries"`
	Seconds   float64 `json:"seconds"`
	// RefusedEvents are the refused events by their number in the file.
	RefusedEvents []RefusedCloudEvent `json:"refusedEvents,omitempty"`
}

// RefusedCloudEvent is one refused event of `events send`: its number in
// the file (1 for the first), its line (a file of lines), its id, and
// usage's status, code and detail.
type RefusedCloudEvent struct {
	Event  int    `json:"event"`
	Line   int    `json:"line,omitempty"`
	ID     string `json:"id,omitempty"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
}

func eventsSend(fs *flag.FlagSet) runFunc {
	fs.Bool("platform", false, "send as a platform gateway (role platform-ingest, no tenant): events of any subject")
	batch := fs.Int("batch", 500, fmt.Sprintf("events per request, 1 to %d (fewer when a request would pass %d MiB)", maxEventsBatch, maxEventsBody>>20))
	retries := fs.Int("retries", 5, "retries of a request the service could not take (unreachable, 5xx, 429), with backoff; replays are safe")
	return func(ctx context.Context, c *Client, args []string) error {
		if len(args) > 1 {
			return usagef("give one file, or - for stdin")
		}
		if *batch < 1 || *batch > maxEventsBatch {
			return usagef("-batch must be from 1 to %d", maxEventsBatch)
		}
		in, name, done, err := c.input(args)
		if err != nil {
			return err
		}
		defer done()
		if in == nil {
			return usagef("no input: give a file")
		}
		evs, err := readCloudEvents(in, c.tenant)
		if err != nil {
			return usageError{name + ": " + err.Error()}
		}
		s, err := c.sendEvents(ctx, evs, *batch, *retries)
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
					rows[i] = map[string]any{"event": json.Number(fmt.Sprint(r.Event)), "id": r.ID,
						"status": json.Number(fmt.Sprint(r.Status)), "code": r.Code, "detail": r.Detail}
					if r.Line > 0 {
						rows[i]["line"] = json.Number(fmt.Sprint(r.Line))
					}
				}
				fmt.Fprintln(c.out, "refused:")
				c.table(rows, col("EVENT", "event"), col("LINE", "line"), col("ID", "id"), col("STATUS", "status"), col("CODE", "code"), col("DETAIL", "detail"))
				fmt.Fprintln(c.out)
			}
			fmt.Fprintf(c.out, "%d events in %d requests (%d retries) in %.1fs: %d sent (new or replayed), %d refused, %d not written with them\n",
				s.Events, s.Requests, s.Retries, s.Seconds, s.Sent, s.Refused, s.Unwritten)
		}
		if s.Refused+s.Unwritten > 0 {
			return &SomeRefusedError{Refused: s.Refused, Unwritten: s.Unwritten, Total: s.Events}
		}
		return nil
	}
}

// chunks cuts evs into requests of at most batch events and
// maxEventsBody bytes.
func chunks(evs []cloudEvent, batch int) [][]cloudEvent {
	var out [][]cloudEvent
	lo, size := 0, 2 // the brackets
	for i, e := range evs {
		if i > lo && (i-lo >= batch || size+len(e.raw)+1 > maxEventsBody) {
			out = append(out, evs[lo:i])
			lo, size = i, 2
		}
		size += len(e.raw) + 1 // and a comma
	}
	if lo < len(evs) {
		out = append(out, evs[lo:])
	}
	return out
}

// sendEvents posts evs in batches, retrying a batch the service could not
// take (the same events again are replays). A batch with a refused event
// is not written at all; the others are still sent.
func (c *Client) sendEvents(ctx context.Context, evs []cloudEvent, batch, retries int) (EventsSummary, error) {
	start := time.Now()
	s := EventsSummary{Events: len(evs)}
	for _, chunk := range chunks(evs, batch) {
		body := make([]json.RawMessage, len(chunk))
		for i, e := range chunk {
			body[i] = e.raw
		}
		first, last := chunk[0], chunk[len(chunk)-1]
		for attempt := 0; ; attempt++ {
			var refusal usageapi.EventsProblem
			_, err := c.do(ctx, call{service: "usage", method: http.MethodPost, path: "/v1/events", body: body,
				header: map[string]string{"Content-Type": mediaCloudEventsBatch}, problem: &refusal})
			if err == nil {
				s.Sent += len(chunk)
				break
			}
			if refusal.Errors != nil && len(*refusal.Errors) > 0 {
				named := map[int]bool{}
				for _, e := range *refusal.Errors {
					if e.Index < 0 || e.Index >= len(chunk) || named[e.Index] {
						return s, fmt.Errorf("POST /v1/events answered an error for index %d of a batch of %d", e.Index, len(chunk))
					}
					named[e.Index] = true
					ev := chunk[e.Index]
					s.RefusedEvents = append(s.RefusedEvents, RefusedCloudEvent{Event: ev.number, Line: ev.line, ID: ev.id,
						Status: e.Status, Code: e.Code, Detail: e.Detail})
				}
				s.Refused += len(named)
				s.Unwritten += len(chunk) - len(named)
				break
			}
			if attempt >= retries || !retryable(err) {
				return s, fmt.Errorf("%s to %s (%d of %d events sent before): %w", first.where(), last.where(), s.Sent, len(evs), err)
			}
			s.Retries++
			wait := time.Duration(200<<min(attempt, 5)) * time.Millisecond
			fmt.Fprintf(c.err, "billingctl: %s to %s: %v; retrying in %v\n", first.where(), last.where(), err, wait)
			select {
			case <-ctx.Done():
				return s, ctx.Err()
			case <-time.After(wait):
			}
		}
		s.Requests++
	}
	s.Seconds = time.Since(start).Seconds()
	return s, nil
}
